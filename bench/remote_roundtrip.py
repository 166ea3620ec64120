"""`@tcl.remote` round trip of a trivial function, on the local default and on an SSH host.

In the same run, against:
- `tcl submit` of the same work (a new run each time: snapshot, placement, runner, job);
- a bare cloudpickle-over-SSH call (`ssh HOST python -c ...`, the payload on stdin: a new
  interpreter each call, as the simplest tool would do it);
- the call protocol with no tunnel at all (a worker on this machine's loopback): the floor.
The SSH host is the testbed's sshd on 127.0.0.1:2222, its shim from `tcl host setup`, jobs
run as processes of the host (tcl's venv: the worker's cloudpickle must be the workstation's,
which the testbed image's Python lacks). Reported: the first call (the session starts: submit,
runner, worker), then the median of warm calls, and the breakdown.

    uv run python bench/remote_roundtrip.py [--calls 20] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cloudpickle

from bench._controllib import TCL, VENV, Bed, testbed, time_to_line
from tcl.control.localshim import stop_local_shim


def trivial(x: int) -> int:
    return x + 1


def warm_calls(fn: object, calls: int) -> list[float]:
    out = []
    for i in range(calls):
        t0 = time.perf_counter()
        assert fn(i) == i + 1  # type: ignore[operator]
        out.append(time.perf_counter() - t0)
    return out


def session_calls(placement: dict[str, str], calls: int) -> tuple[float, list[float]]:
    """(first call, warm calls) through a real tcl session with ``placement``."""
    from tcl.remote import decorator

    fn = decorator.remote(**placement)(trivial) if placement else decorator.remote(trivial)
    t0 = time.perf_counter()
    assert fn(0) == 1
    first = time.perf_counter() - t0
    try:
        return first, warm_calls(fn, calls)
    finally:
        decorator.close_sessions()


def floor_calls(calls: int) -> list[float]:
    from tcl.remote import decorator
    from tcl.remote.local import SubprocessSession

    previous = decorator.set_session_factory(lambda p: SubprocessSession())
    try:
        fn = decorator.remote(trivial)
        fn(0)
        return warm_calls(fn, calls)
    finally:
        decorator.set_session_factory(previous)


_BARE = (
    "import sys, cloudpickle; f, a = cloudpickle.loads(sys.stdin.buffer.read()); "
    "sys.stdout.buffer.write(cloudpickle.dumps(f(*a)))"
)


def bare_ssh_calls(bed: Bed, reps: int) -> list[float]:
    payload = cloudpickle.dumps((trivial, (1,)))
    argv = [*bed.ssh_argv(), f"{VENV}/bin/python", "-c", f'"{_BARE}"']
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        res = subprocess.run(argv, input=payload, capture_output=True, check=True)
        assert cloudpickle.loads(res.stdout) == 2
        out.append(time.perf_counter() - t0)
    return out


def submit_calls(env: dict[str, str], cwd: Path, host: list[str], reps: int) -> list[float]:
    argv = [TCL, "submit", *host, "--", sys.executable, "-c", "print(1 + 1)"]
    return [time_to_line(argv, env, cwd, "2") for _ in range(reps)]


def med_ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:.1f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    floor = floor_calls(args.calls)
    keep = dict(os.environ)

    # The local default: no config, a private state dir.
    home = Path(tempfile.mkdtemp(prefix="tcl-bench-remote."))
    work = home / "work"
    work.mkdir()
    os.environ.update(HOME=str(home), TCL_STATE_DIR=str(home / "state"), NO_COLOR="1")
    os.environ.pop("TCL_CONFIG", None)
    os.chdir(work)
    try:
        local_first, local_warm = session_calls({}, args.calls)
        local_submit = submit_calls(dict(os.environ), work, [], args.reps)
    finally:
        stop_local_shim(home / "state" / "local-shim")
        os.environ.clear()
        os.environ.update(keep)
        shutil.rmtree(home, ignore_errors=True)

    with testbed("process") as bed:
        os.environ.update(bed.env())
        os.chdir(bed.work)
        try:
            ssh_first, ssh_warm = session_calls({"host": "box"}, args.calls)
            ssh_submit = submit_calls(bed.env(), bed.work, ["--host", "box"], args.reps)
            bare = bare_ssh_calls(bed, args.reps * 3)
        finally:
            os.environ.clear()
            os.environ.update(keep)

    print(f"trivial function, {args.calls} warm calls, {args.reps} submits (medians)")
    print(f"  call protocol, no tunnel (floor):        {med_ms(floor)}")
    print(
        f"  local default: first call {local_first:.2f} s, warm {med_ms(local_warm)}, "
        f"tcl submit {med_ms(local_submit)}"
    )
    print(
        f"  ssh host:      first call {ssh_first:.2f} s, warm {med_ms(ssh_warm)}, "
        f"tcl submit {med_ms(ssh_submit)}, bare cloudpickle over ssh {med_ms(bare)}"
    )
    sw, sb, ss = (statistics.median(x) for x in (ssh_warm, bare, ssh_submit))
    print(f"  ratio warm @tcl.remote / bare ssh call: {sw / sb:.3f}; / tcl submit: {sw / ss:.3f}")
    print(f"  tunnel share of a warm ssh call: {(sw - statistics.median(floor)) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
