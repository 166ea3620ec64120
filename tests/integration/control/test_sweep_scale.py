"""Sweeps at scale on real shims: two SSH hosts of the sshd testbed (network namespaces, fake
h100:8 each, process executor) plus the local host, and real `tcl serve` schedulers.

- 100 entries (the seed's 1,200 with TCL_TEST_SWEEP_ENTRIES=1200) through one scheduler
  (SQLite): every entry runs exactly once and ends done.
- Two schedulers sharing PostgreSQL, which is stopped for 20 s mid-sweep (every lease lapses
  meanwhile: each comes back to reap the other's), then one of them killed with SIGKILL: its
  leases expire, the other adopts its entries (their runs go on on their hosts), and again
  every entry runs exactly once and none fails.

"Exactly once" is counted from the jobs' own output: each job appends its job_id to a file on
the shared filesystem (the netns hosts share it), not from tcl's tables.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.control.sshlab import VENV, free_port, stop_shims
from tests.integration.tclcli import TCL, stop_local_shim_and_tasks, stored_matrix_status
from tests.testbed import SshTestbed, postgres_outage, private_schema

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# CI runs 100 (every path of the 1,200-entry seed sweep: five waves on 20 GPUs, each GPU
# reused four times); the seed's full scale: TCL_TEST_SWEEP_ENTRIES=1200.
ENTRIES = int(os.environ.get("TCL_TEST_SWEEP_ENTRIES", "100"))
PG_OUTAGE_S = 20.0  # the issue's: longer than the leases (4 s), shorter than a run's host budget
# CI18 found a job run twice here: a placement that could not record its started job (the
# store down) stopped it, too late for a 1.5 s job, and the next claimer placed it again. Now
# such a job is left running and adopted (lifecycle.place). TCL_TEST_PG_OUTAGE=0 skips it.
PG_OUTAGE = os.environ.get("TCL_TEST_PG_OUTAGE", "1") == "1"
JOB = """
import os, sys, time
time.sleep(float(sys.argv[2]))
fd = os.open(os.path.join(os.environ["OUT"], "ran"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
os.write(fd, f"{sys.argv[1]} {os.environ.get('TCL_NODE_HOST', '-')}\\n".encode())
os.close(fd)
"""


class Cluster:
    def __init__(self, root: Path, tb: SshTestbed, local: bool) -> None:
        self.root = root
        self.repo, self.out = root / "repo", root / "out"
        self.repo.mkdir()
        self.out.mkdir()
        self.out.chmod(0o777)
        subprocess.run(["git", "init", "-q"], cwd=self.repo, check=True)
        (self.repo / "job.py").write_text(JOB)
        self.shim_dirs = {h: root / f"shim-{h}" for h in ("g1", "g2")}
        common = (
            f"user: root, identity_file: {tb.key}, known_hosts: {tb.known_hosts}, "
            f"ssh_config_file: {tb.config}, connect_timeout_s: 3, shim_venv: {VENV}, "
            f'proxy_jump: "127.0.0.1:2222", executor: process, fake_accelerators: "h100:8"'
        )
        here = '  here: {type: local, fake_accelerators: "h100:4", executor: process}\n'
        self.config = root / "config.yaml"
        self.config.write_text(
            "hosts:\n"
            + (here if local else "")
            + f"  g1: {{type: ssh, ssh: {tb.ip(1)}, {common}, shim_port: {free_port()}, "
            f"shim_dir: {self.shim_dirs['g1']}}}\n"
            f"  g2: {{type: ssh, ssh: {tb.ip(2)}, {common}, shim_port: {free_port()}, "
            f"shim_dir: {self.shim_dirs['g2']}}}\n"
        )
        self.homes: list[Path] = []
        self.serves: list[subprocess.Popen[bytes]] = []

    def env(self, home: Path, db_url: str | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "TCL_DB_URL"}
        env.update(
            HOME=str(home),
            TCL_STATE_DIR=str(home / "state"),
            TCL_CONFIG=str(self.config),
            NO_COLOR="1",
            TCL_CODE_CACHE_DIR=str(self.root / "code"),
        )
        if db_url:
            env["TCL_DB_URL"] = db_url
        return env

    def home(self, name: str) -> Path:
        home = self.root / name
        home.mkdir()
        self.homes.append(home)
        return home

    def tcl(self, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [TCL, *args],
            cwd=self.repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if proc.returncode != 0:
            pytest.fail(f"tcl {' '.join(args)} -> {proc.returncode}\n{proc.stdout}{proc.stderr}")
        return proc

    def serve(self, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
        log = open(Path(env["HOME"]) / "serve.out", "wb")  # noqa: SIM115  the child keeps it
        proc = subprocess.Popen(
            [TCL, "serve", *args], cwd=self.repo, env=env, stdout=log, stderr=subprocess.STDOUT
        )
        self.serves.append(proc)
        return proc

    def add(self, env: dict[str, str], name: str, entries: int, sleep_s: float) -> None:
        self.tcl(
            env,
            "matrix",
            "add",
            "--name",
            name,
            "--no-start",
            "--chip",
            "h100",
            "--grid",
            "i=" + ",".join(str(i) for i in range(entries)),
            "--env",
            f"OUT={self.out}",
            "--",
            "python",
            "job.py",
            "{i}",
            str(sleep_s),
        )

    def status(self, env: dict[str, str], name: str) -> dict[str, Any]:
        return dict(json.loads(self.tcl(env, "matrix", "status", name, "--json").stdout))

    def wait_done(self, env: dict[str, str], name: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            st = stored_matrix_status(env, name)  # looks in this process: see tclcli.py
            c = st["counts"]
            if c["queued"] + c["claimed"] + c["running"] == 0:
                return self.status(env, name)  # what the CLI says, once
            dead = [p.args for p in self.serves if p.poll() not in (None, -signal.SIGKILL)]
            if time.monotonic() > deadline or dead:
                pytest.fail(f"matrix {name} not finished: {st}\n{self.logs()}")
            time.sleep(0.5)  # a look costs milliseconds

    def logs(self) -> str:
        """The schedulers' warnings (their last 4,000 characters each)."""
        return "\n".join(
            f"--- {h.name}\n" + (h / "serve.out").read_text()[-4000:]
            for h in self.homes
            if (h / "serve.out").exists()
        )

    def twice(self) -> str:
        """For a job that ran more than once: where each run was (the job's own lines) and
        every line of the schedulers' logs that names it."""
        path = self.out / "ran"
        lines = path.read_text().splitlines() if path.exists() else []
        dup = {k for k, n in Counter(line.split()[0] for line in lines).items() if n > 1}
        out = [line for line in lines if line.split()[0] in dup]
        for h in self.homes:
            log = h / "serve.out"
            text = log.read_text().splitlines() if log.exists() else []
            out += [f"{h.name}: {line}" for line in text if any(f" {d} " in line for d in dup)]
        return "\n".join(out)

    def ran(self) -> Counter[str]:
        path = self.out / "ran"
        lines = path.read_text().splitlines() if path.exists() else []
        return Counter(line.split()[0] for line in lines)

    def close(self, env: dict[str, str] | None = None) -> None:
        if env is not None:  # cancel what is left (its runs stopped) before the schedulers go
            listed = subprocess.run(
                [TCL, "matrix", "ls", "--json"],
                env=env,
                cwd=self.repo,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            for m in json.loads(listed.stdout or "[]"):
                subprocess.run(
                    [TCL, "matrix", "cancel", m["name"]],
                    env=env,
                    cwd=self.repo,
                    capture_output=True,
                    timeout=120,
                    check=False,
                )
        for proc in self.serves:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        for home in self.homes:
            stop_local_shim_and_tasks(home / "state" / "local-shim")
        stop_shims(self.shim_dirs.values())


@pytest.fixture
def cluster(ssh_testbed: SshTestbed, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path, ssh_testbed, local=True)
    try:
        yield c
    finally:
        c.close(c.env(c.homes[0]) if c.homes else None)


def test_every_entry_of_a_large_sweep_runs_exactly_once(cluster: Cluster) -> None:
    env = cluster.env(cluster.home("ws"))
    for host in ("g1", "g2"):
        cluster.tcl(env, "host", "setup", host, "--json")
    cluster.add(env, "big", ENTRIES, 0.0)
    t0 = time.monotonic()
    cluster.serve(env, "--batch", "32")
    st = cluster.wait_done(env, "big", 1500)
    took = time.monotonic() - t0
    ran = cluster.ran()
    assert st["counts"]["done"] == ENTRIES, (st["counts"], st["failures"])
    assert len(ran) == ENTRIES and set(ran.values()) == {1}, ran.most_common(3)
    print(f"{ENTRIES} entries in {took:.0f} s ({ENTRIES / took:.1f}/s)")


@pytest.fixture
def pg_cluster(
    ssh_testbed: SshTestbed, tmp_path: Path, postgres_url: str
) -> Iterator[tuple[Cluster, str]]:
    c = Cluster(tmp_path, ssh_testbed, local=False)
    db = private_schema(postgres_url, "tcl_sweep")
    try:
        yield c, db
    finally:
        c.close(c.env(c.homes[-1], db) if c.homes else None)


def test_two_schedulers_through_a_postgres_outage_and_a_kill_run_every_entry_once(
    pg_cluster: tuple[Cluster, str],
) -> None:
    cluster, db = pg_cluster
    a_env = cluster.env(cluster.home("a"), db)
    b_env = {**cluster.env(cluster.home("b"), db), "TCL_SCHEDULER_NAME": "pod-b"}
    for host in ("g1", "g2"):
        cluster.tcl(a_env, "host", "setup", host, "--json")
    entries = min(
        ENTRIES, 80
    )  # five waves on 16 GPUs: runs on both sides of the outage and the kill
    cluster.add(a_env, "shared", entries, 1.5)
    lease = ("--lease-s", "4", "--heartbeat-s", "1")
    a = cluster.serve(a_env, *lease, "--name", "pod-a")
    cluster.serve(b_env, *lease)

    def until_ran(n: int) -> None:
        deadline = time.monotonic() + 300
        while sum(cluster.ran().values()) < n:
            assert time.monotonic() < deadline, (cluster.status(a_env, "shared"), cluster.logs())
            time.sleep(0.5)

    until_ran(entries // 4)  # well under way on both
    if PG_OUTAGE:
        postgres_outage(PG_OUTAGE_S)  # the jobs go on meanwhile; every lease lapses
    until_ran(entries // 2)
    a.send_signal(signal.SIGKILL)
    a.wait(10)
    st = cluster.wait_done(b_env, "shared", 900)
    ran = cluster.ran()
    failures = json.dumps(st["failures"], indent=1)
    assert st["counts"]["done"] == entries, f"{st['counts']}\n{failures}\n{cluster.logs()}"
    assert len(ran) == entries and set(ran.values()) == {1}, (ran.most_common(3), cluster.twice())
    export = json.loads(cluster.tcl(b_env, "matrix", "export", "shared").stdout)
    assert all(e["state"] == "done" for e in export.values())
    # which of the two ran each entry (the seed's pod): a's before its kill, b's the rest
    assert {e["scheduler"] for e in export.values()} == {"pod-a", "pod-b"}, export
    assert all(p.poll() is None for p in cluster.serves[1:]), cluster.logs()  # b went on
