"""Where the test suite's CPU goes: by kind of process and by test.

The suite is CPU-bound on 2 cores (4 workers; /proc/stat: ~97 % busy), so its wall time is its
CPU time over two. pytest's durations say how long a test took, not what it cost: most of the
CPU is spent in the processes the tests start (agents, runners, jobs, `tcl` commands). This
counts every process's CPU by the kernel's process accounting (``accton``, Debian's ``acct``,
installed here when missing; root only) and names each process by a sampler that reads every
new process's command line and test (its ``PYTEST_CURRENT_TEST``, else the test's temporary
directory in its ``HOME``, ``TCL_STATE_DIR``, command line or working dir) every 0.2 s. A
process that lived under 0.2 s keeps its executable's name only (``?python``).

    uv run python -m tests.cpuprofile run [pytest args]   # scripts/test.sh under accounting
    uv run python -m tests.cpuprofile report DIR [--top 40]
"""

from __future__ import annotations

import argparse
import calendar
import collections
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TICKS_PER_S = 100  # acct v3's times (AHZ)
_TEST_DIR = re.compile(r"pytest-of-[^/]+/pytest-\d+/(?:popen-gw\d+/)?([^/\s]+)")
_ENV_KEYS = (b"HOME", b"TCL_STATE_DIR", b"TMPDIR")


@dataclass(frozen=True)
class Seen:
    started: float  # epoch seconds
    argv: list[str]
    test: str  # "" when it named none


def _boot_time() -> float:
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime"):
            return float(line.split()[1])
    raise RuntimeError("/proc/stat has no btime")


def _test_of(pid: int, argv: list[str]) -> str:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        raw = b""
    env = dict(kv.split(b"=", 1) for kv in raw.split(b"\0") if b"=" in kv)
    current = env.get(b"PYTEST_CURRENT_TEST", b"").decode(errors="replace")
    if current:
        return current.split(" (")[0].split("::")[-1].split("[")[0].split("@")[0][:30]
    places = [env.get(k, b"").decode(errors="replace") for k in _ENV_KEYS] + [" ".join(argv)]
    with contextlib.suppress(OSError):
        places.append(os.readlink(f"/proc/{pid}/cwd"))
    for place in places:
        m = _TEST_DIR.search(place)
        if m:
            return re.sub(r"\d+$", "", m.group(1))[:30]
    return ""


def sample(out_file: Path) -> None:
    """Append one JSON line per new process until killed: pid, start (epoch), argv, test."""
    boot = _boot_time()
    seen: set[tuple[int, int]] = set()
    with out_file.open("a") as out:
        while True:
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                pid = int(entry.name)
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
                    start = int(stat[stat.rindex(")") + 2 :].split()[19])
                    if (pid, start) in seen:
                        continue
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except (OSError, ValueError, IndexError):
                    continue
                args = [a.decode(errors="replace") for a in argv if a][:14]
                if not args:
                    continue  # a kernel thread, or not yet exec'd: asked again next round
                seen.add((pid, start))
                row = [pid, boot + start / TICKS_PER_S, args, _test_of(pid, args)]
                out.write(json.dumps(row) + "\n")
            out.flush()
            time.sleep(0.2)


def kind(argv: list[str]) -> str:
    """What a process is, from its command line."""
    line = " ".join(argv)
    second = argv[1].rsplit("/", 1)[-1] if len(argv) > 1 else ""
    if "exec(eval(sys.stdin" in line:
        return "pytest-xdist worker"
    if second == "tcl":
        return f"tcl {argv[2] if len(argv) > 2 else ''}".strip()
    for needle, name in (
        ("tcl.control.daemon", "tcl serve (daemon)"),
        ("tcl.cli.forkserver", "tcl CLI fork server and its commands"),
        ("tcl-runner forkserver", "tcl-runner fork server and its runners"),
        ("tcl-shim", "tcl-shim"),
        ("tcl.shim.main", "tcl-shim"),
        ("tcl.jobs", "tcl.jobs job"),
        ("tcl-runner", "tcl-runner"),
    ):
        if needle in line:
            return name
    exe = argv[0].rsplit("/", 1)[-1] if argv else "?"
    if exe.startswith("python") and len(argv) > 1:
        if "-m" in argv[1:-1]:
            return f"python -m {argv[argv.index('-m') + 1]}"
        return "python -c" if "-c" in argv else f"python {second}"
    return exe[:40]


def report(where: Path, top: int) -> None:
    seen: dict[int, list[Seen]] = collections.defaultdict(list)
    for line in (where / "procs.jsonl").read_text().splitlines():
        pid, started, argv, test = json.loads(line)
        seen[pid].append(Seen(started, argv, test))
    dumped = subprocess.run(
        ["dump-acct", str(where / "pacct")], capture_output=True, text=True, check=True
    ).stdout
    by_kind: dict[str, float] = collections.defaultdict(float)
    by_test: dict[str, float] = collections.defaultdict(float)
    for line in dumped.splitlines():
        f = [x.strip() for x in line.split("|")]
        cpu = (float(f[2]) + float(f[3])) / TICKS_PER_S
        began = calendar.timegm(time.strptime(f[14], "%a %b %d %H:%M:%S %Y"))
        match = [s for s in seen.get(int(f[9]), []) if abs(s.started - began) <= 1.5]
        if match:
            by_kind[kind(match[-1].argv)] += cpu
            by_test[match[-1].test or "(no test: " + kind(match[-1].argv) + ")"] += cpu
        else:
            by_kind["?" + f[0]] += cpu
            by_test["?" + f[0]] += cpu
    total = sum(by_kind.values())
    for title, counts in (("kind of process", by_kind), ("test", by_test)):
        print(f"CPU seconds by {title} (all: {total:.0f} s)")
        for name, cpu in sorted(counts.items(), key=lambda kv: -kv[1])[:top]:
            print(f"{cpu:8.1f} {100 * cpu / total:5.1f}%  {name}")


def run(pytest_args: list[str]) -> int:
    if os.geteuid() != 0:
        sys.exit("process accounting needs root")
    if shutil.which("accton") is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "acct"], check=True)
    where = REPO / "test-artefacts" / "cpuprofile"
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    (where / "pacct").touch()
    subprocess.run(["accton", str(where / "pacct")], check=True)
    sampler = subprocess.Popen(
        [sys.executable, "-m", "tests.cpuprofile", "sample", str(where / "procs.jsonl")],
        cwd=REPO,
    )
    try:
        rc = subprocess.run(["bash", "scripts/test.sh", *pytest_args], cwd=REPO).returncode
    finally:
        subprocess.run(["accton", "off"], check=False)
        sampler.send_signal(signal.SIGTERM)
        sampler.wait()
    report(where, 40)
    return rc


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.cpuprofile")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("run").add_argument("pytest_args", nargs=argparse.REMAINDER)
    sub.add_parser("sample").add_argument("out", type=Path)
    r = sub.add_parser("report")
    r.add_argument("dir", type=Path)
    r.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    if args.cmd == "run":
        sys.exit(run(args.pytest_args))
    if args.cmd == "sample":
        sample(args.out)
    else:
        report(args.dir, args.top)


if __name__ == "__main__":
    main()
