"""Fixtures that start the real services integration tests need.

Each fixture calls the project's own scripts in ``scripts/testbed`` (the same ones ``.ci/run``
uses), so a test run on a fresh machine installs and starts what it needs by itself. Nothing
here is mocked: dockerd, sshd, PostgreSQL and SLURM are the real daemons from Debian's packages.
This module is a pytest plugin (``tests/conftest.py``), so its fixtures serve every test folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts" / "testbed"
DOCKER_CLI = "/usr/bin/docker"
BASE_IMAGE = os.environ.get("TCL_TEST_BASE_IMAGE", "tcl-pybase:bookworm")


def run_script(name: str, env: dict[str, str] | None = None, *args: str) -> str:
    """Run one testbed script; fail the test with its output when it fails."""
    proc = subprocess.run(
        ["bash", str(SCRIPTS / name), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"{name} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


SSH_TESTBED_BASE = "/tmp/tcl-testbed-control"
SSH_TESTBED_HOSTS = 3  # a 3-worker TPU pod needs 3 hosts


@dataclass(frozen=True)
class SshTestbed:
    """The sshd hosts of ``scripts/testbed/ssh-up.sh``.

    Key-only sshd "hosts" in network namespaces ``infra-h1..N`` (10.213.0.11..) on bridge
    ``br-infra``, each with its own private ``/var/lib/tcl-shim`` (``base/vm/hN``), plus one on
    127.0.0.1:2222 in the root namespace.
    """

    dir: Path  # keys, known_hosts, ssh_config, sshd pid files
    hosts: int = SSH_TESTBED_HOSTS

    @property
    def base(self) -> Path:
        return self.dir.parent

    @property
    def key(self) -> str:
        return str(self.dir / "id_ed25519")

    @property
    def known_hosts(self) -> str:
        return str(self.dir / "known_hosts")

    @property
    def config(self) -> str:
        return str(self.dir / "ssh_config")

    def pid(self, name: str) -> int:
        return int((self.dir / f"sshd_{name}.pid").read_text().split()[0])

    def ip(self, i: int) -> str:
        """The address of host ``h{i}`` (1-based)."""
        return f"10.213.0.{10 + i}"

    def disk(self, i: int) -> Path:
        """Host ``h{i}``'s private ``/var/lib/tcl-shim``, seen from the root namespace."""
        return self.base / "vm" / f"h{i}"


@pytest.fixture(scope="session")
def ssh_testbed() -> Iterator[SshTestbed]:
    """Start the sshd hosts for the session (ssh-up.sh), remove them afterwards."""
    env = {"BASE": SSH_TESTBED_BASE, "N": str(SSH_TESTBED_HOSTS)}
    run_script("ssh-down.sh", env)  # leftovers of an interrupted run
    run_script("ssh-up.sh", env)
    try:
        yield SshTestbed(Path(SSH_TESTBED_BASE) / "ssh")
    finally:
        run_script("ssh-down.sh", env)


@pytest.fixture(scope="session")
def docker_client() -> Any:
    """A docker SDK client for a running dockerd (started by the testbed script if needed)."""
    import docker

    if shutil.which("dockerd") is None:
        run_script("install.sh")
    run_script("dockerd-up.sh")
    return docker.from_env()


@pytest.fixture(scope="session")
def base_image(docker_client: Any) -> str:
    """The local Python base image (debootstrapped Debian, imported; no registry needed)."""
    run_script("base-image.sh", {"IMAGE": BASE_IMAGE})
    return BASE_IMAGE


def runner_image_tag(base: str | None = None) -> str:
    """Tag derived from everything that goes into the runner image, so worktrees never clash.
    ``base``: an image other than the default base, whose id then goes into the tag too."""
    h = hashlib.sha256()
    inputs = [REPO / "Dockerfile.runner", REPO / "pyproject.toml"]
    inputs += sorted((REPO / "images").rglob("*"))
    inputs += sorted((REPO / "tcl").rglob("*.py"))
    for path in inputs:
        if path.is_file():
            h.update(str(path.relative_to(REPO)).encode())
            h.update(path.read_bytes())
    if base is not None:
        h.update(image_id(base).encode())
    return f"tcl-runner:{h.hexdigest()[:12]}"


def image_id(image: str) -> str:
    out = subprocess.run(
        [DOCKER_CLI, "image", "inspect", "-f", "{{.Id}}", image],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def build_image(tag: str, context: Path, dockerfile: str, *build_args: str) -> str:
    """``docker build`` unless ``tag`` exists already (tags are content hashes: cached)."""
    probe = subprocess.run([DOCKER_CLI, "image", "inspect", tag], capture_output=True, check=False)
    if probe.returncode == 0:
        return tag
    args = [a for kv in build_args for a in ("--build-arg", kv)]
    proc = subprocess.run(
        [DOCKER_CLI, "build", "-q", "--force-rm", *args, "-f", "-", "-t", tag, str(context)],
        input=dockerfile,
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"image build failed ({tag}):\n{proc.stdout}\n{proc.stderr}")
    return tag


def build_runner_image(base: str, default_base: bool = False) -> str:
    """The runner image built from Dockerfile.runner on top of ``base``."""
    tag = runner_image_tag(None if default_base else base)
    return build_image(tag, REPO, (REPO / "Dockerfile.runner").read_text(), f"BASE_IMAGE={base}")


@pytest.fixture(scope="session")
def runner_image(docker_client: Any, base_image: str) -> str:
    """The runner image built from Dockerfile.runner on top of the local base image."""
    return build_runner_image(base_image, default_base=True)


def _postgres_env() -> dict[str, str]:
    return {
        "BASE": os.environ.get("TCL_TEST_PG_BASE", "/tmp/tcl-testbed-pg"),
        "PGPORT": os.environ.get("TCL_TEST_PGPORT", "54329"),
    }


def postgres_outage(down_s: float) -> None:
    """Take the session's PostgreSQL away for ``down_s`` seconds (every connection dropped),
    then back with its data (pg-outage.sh)."""
    run_script("pg-outage.sh", {**_postgres_env(), "DOWN_S": str(down_s)})


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL 15 on loopback; its URL (SQLAlchemy/psycopg form)."""
    env = _postgres_env()
    url = run_script("pg-up.sh", env).strip().splitlines()[-1]
    try:
        yield url.replace("postgresql://", "postgresql+psycopg://", 1)
    finally:
        run_script("pg-down.sh", env)


@dataclass(frozen=True)
class JuicefsVolume:
    """The JuiceFS volume of ``scripts/testbed/juicefs-up.sh``: Redis (password set) on
    loopback and on the sshd hosts' bridge, a local directory as its object storage."""

    meta_url: str  # without the password
    password: str
    port: int

    def mount_url(self, password: str | None = None) -> str:
        """The cluster's ``mount:`` value, the password in it as a user writes it."""
        pw = self.password if password is None else password
        return self.meta_url.replace("redis://", f"redis://:{pw}@", 1)


@pytest.fixture(scope="session")
def juicefs_volume(ssh_testbed: SshTestbed) -> Iterator[JuicefsVolume]:
    """A formatted volume for the session (after the sshd hosts: Redis listens on their
    bridge); Redis stopped and the storage removed afterwards."""
    port = int(os.environ.get("TCL_TEST_REDIS_PORT", "6389"))
    venv = str(Path(sys.executable).parent.parent)
    env = {"BASE": SSH_TESTBED_BASE, "REDIS_PORT": str(port), "VENV": venv}
    run_script("juicefs-down.sh", env)
    url = run_script("juicefs-up.sh", env).strip().splitlines()[-1]
    password = (Path(SSH_TESTBED_BASE) / "juicefs" / "password").read_text().strip()
    try:
        yield JuicefsVolume(url, password, port)
    finally:
        run_script("juicefs-down.sh", env)


def private_schema(postgres_url: str, prefix: str = "tcl_test") -> str:
    """The URL of a fresh PostgreSQL schema of a test's own (its ``search_path``)."""
    from sqlalchemy import text

    from tcl.control.store import Store

    schema = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = Store(postgres_url)
    with admin.engine.begin() as c:
        c.execute(text(f'CREATE SCHEMA "{schema}"'))
    admin.close()
    sep = "&" if "?" in postgres_url else "?"
    return f"{postgres_url}{sep}options=-csearch_path%3D{schema}"


def charliecloud_image(image: str, dest: Path) -> Path:
    """A Charliecloud image directory (``ch-run DEST -- CMD``) made from the local docker
    ``image``; rebuilt only when the image id changed (scripts/testbed/charliecloud-image.sh)."""
    out = run_script("charliecloud-image.sh", None, image, str(dest))
    return Path(out.strip().splitlines()[-1])


@dataclass(frozen=True)
class SlurmCluster:
    """The SLURM testbed of scripts/testbed/slurm-up.sh: slurmctld and two slurmd on this machine,
    and a key-only sshd login node on 127.0.0.1 that shares this machine's filesystem (the
    cluster's shared filesystem: anything under ``base`` is visible to jobs at the same path).

    ``ssh -F ssh_config host CMD`` (or asyncssh with ``config=[ssh_config]``) runs CMD on the login
    node with ``SLURM_CONF`` set and sinfo/squeue/sbatch/scancel/scontrol/srun/sacct, python3 (the
    project's 3.11), uv and ch-run on PATH. There is no accounting (sacct answers "disabled"):
    finished jobs stay visible to ``squeue -t all`` and ``scontrol show job`` for 5 minutes.
    ``slurmctld -c`` starts every session afresh, so job ids restart at 1: name files uniquely.
    """

    ssh_config: Path  # the ssh config file in which the login node is ``host``
    host: str  # "slurm-login"
    slurm_conf: Path
    base: Path  # the cluster dir (config, logs, keys); ``base / "jobs"`` is free for tests
    partitions: tuple[str, ...]  # ("gpu", "preempt", "spot", "urgent"); gpu is the default
    nodes: tuple[str, ...]  # ("node1", "node2")
    gres: str  # per node: "gpu:h100:4"
    login_port: int

    @property
    def identity_file(self) -> Path:
        return self.base / "login" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.base / "login" / "known_hosts"

    def ssh(self, command: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on the login node with the ssh binary (not checked)."""
        return subprocess.run(
            ["ssh", "-F", str(self.ssh_config), self.host, command],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )


# A session takes the first free slot (a lock file held while it runs), so two sessions on one
# machine (two worktrees) get separate clusters instead of stopping each other's. A slot's lock
# goes with its holder, even a killed one; its next holder's slurm-up.sh clears what is left.
_SLURM_SLOTS = 8


def _slurm_slot_env(slot: int) -> dict[str, str]:
    root = os.environ.get("TCL_TEST_SLURM_BASE", "/tmp/tcl-testbed-slurm")
    return {
        "BASE": root if slot == 0 else f"{root}-{slot}",
        "LOGIN_PORT": str(2230 + slot),
        "SLURMCTLD_PORT": str(16817 + 10 * slot),
        "SLURMD_PORT": str(17001 + 10 * slot),
        # coordinator ports follow job ids (61440 + id % 4096): a slot's jobs get their own
        "FIRST_JOB_ID": str(1 + 512 * slot),
    }


def _slurm_query(slurm_conf: Path, fmt: str, *args: str) -> list[str]:
    proc = subprocess.run(
        ["sinfo", "-h", "-o", fmt, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "SLURM_CONF": str(slurm_conf)},
        check=True,
    )
    return list(dict.fromkeys(line.strip() for line in proc.stdout.splitlines() if line.strip()))


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A running SLURM testbed for the session (slurm-up.sh; slurm-down.sh at the end)."""
    if not Path("/usr/sbin/slurmctld").exists() or shutil.which("ch-run") is None:
        run_script("install.sh")
    with contextlib.ExitStack() as stack:
        failures = []
        for slot in range(_SLURM_SLOTS):
            env = _slurm_slot_env(slot)
            lock: IO[str] = stack.enter_context(open(env["BASE"] + ".lock", "a"))
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # another session's cluster
            proc = subprocess.run(
                ["bash", str(SCRIPTS / "slurm-up.sh")],
                capture_output=True,
                text=True,
                env={**os.environ, **env},
                check=False,
            )
            if proc.returncode == 0:
                break
            failures.append(f"slot {slot}: {proc.stdout}\n{proc.stderr}")
            run_script("slurm-down.sh", env)
            if "is taken by another process" not in proc.stderr:
                pytest.fail(f"slurm-up.sh failed ({proc.returncode}):\n{failures[-1]}")
        else:
            pytest.fail("no SLURM testbed slot could start:\n" + "\n".join(failures))
        stack.callback(run_script, "slurm-down.sh", env)
        ssh_config = Path(proc.stdout.strip().splitlines()[-1])
        base = ssh_config.parent
        slurm_conf = base / "slurm.conf"
        (base / "jobs").mkdir(exist_ok=True)
        yield SlurmCluster(
            ssh_config=ssh_config,
            host="slurm-login",
            slurm_conf=slurm_conf,
            base=base,
            partitions=tuple(_slurm_query(slurm_conf, "%R")),
            nodes=tuple(_slurm_query(slurm_conf, "%N", "-N")),
            gres=_slurm_query(slurm_conf, "%G")[0],
            login_port=int(env["LOGIN_PORT"]),
        )
