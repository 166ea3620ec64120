"""A job's log at the workstation, through the SSH tunnel: what ``tcl submit`` (followed, through
``tcl serve``) prints on its stdout, against ``ssh HOST python3 -c JOB`` printing the same job's
output, in the same run, on the same testbed host (sshd on 127.0.0.1:2222, the shim's process
executor).

- latency: the job prints a line with its wall-clock time every ``--interval-ms``; each line's
  latency is the time it is read at the workstation minus the time in it (one machine, one
  clock): p50 and p99. Issue 29's goal: p50 <= 5 ms, p99 <= 20 ms.
- throughput: the job writes ``--mb`` MB in 1 MB blocks of 100-byte lines; MB/s from the first
  byte read to the last one. Issue 29's goal: tcl / ssh >= 0.9.

    uv run python -m bench.follow_log [--lines 300] [--interval-ms 10] [--mb 64] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import threading
import time

import psutil

from bench._controllib import TCL, Bed, testbed

SHOW_SLOW = os.environ.get("SHOW_SLOW") == "1"


def latency_job(lines: int, interval_s: float) -> list[str]:
    prog = (
        "import time\n"
        f"for i in range({lines}):\n"
        "    print(f'lat {time.time():.6f} {i}', flush=True)\n"
        f"    time.sleep({interval_s})\n"
    )
    return ["python3", "-c", prog]


def throughput_job(mb: int) -> list[str]:
    prog = (
        "import os\n"
        "pad = 'x' * 92\n"
        "block = ''.join(f'{i:07d} {pad}\\n' for i in range(10_000)).encode()\n"
        f"for _ in range({mb}):\n"
        "    data = block\n"
        "    while data:\n"
        "        data = data[os.write(1, data):]\n"
    )
    return ["python3", "-c", prog]


def submit_argv(job: list[str]) -> list[str]:
    return [TCL, "submit", "--chip", "h100", "-n", "1", "--", *job]


def ssh_argv(bed: Bed, job: list[str]) -> list[str]:
    return [*bed.ssh_argv(), shlex.join(job)]  # ssh sends one shell string


def latencies(argv: list[str], bed: Bed) -> list[float]:
    proc = subprocess.Popen(
        argv, env=bed.env(), cwd=bed.work, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    out: list[float] = []
    for line in proc.stdout:
        now = time.time()
        if line.startswith(b"lat "):
            out.append(now - float(line.split()[1]))
            if SHOW_SLOW and out[-1] > 0.02:
                print(f"slow line {line.split()[2].decode()}: {out[-1] * 1e3:.1f} ms")
    proc.wait(120)
    return out


def throughput_mb_s(argv: list[str], bed: Bed, mb: int) -> float:
    want = mb * 10_000 * 101  # 10,000 lines of 101 bytes a block
    proc = subprocess.Popen(
        argv, env=bed.env(), cwd=bed.work, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    got, t0, t1 = 0, 0.0, 0.0
    while got < want and (chunk := os.read(proc.stdout.fileno(), 1 << 20)):
        if not got:
            t0 = time.perf_counter()
        got += len(chunk)
        t1 = time.perf_counter()
    proc.stdout.close()
    proc.wait(300)
    if got < want:
        raise SystemExit(f"{argv[0]}: {got} of {want} bytes arrived")
    return got / (t1 - t0) / 1e6


class CpuSampler:
    """CPU seconds each kind of process used while it ran (sampled every 50 ms, so a process
    that lives shorter than that is missed): where a stream's CPU goes."""

    KINDS = (
        ("tcl.control.daemon", "tcl serve (daemon)"),
        ("tcl submit", "tcl submit (CLI)"),
        ("tcl-runner", "runner"),
        ("tcl-shim", "shim"),
        ("sshd", "sshd"),
        ("ssh ", "ssh client"),
        ("python3 -c", "the job"),
    )

    def __init__(self) -> None:
        self._first: dict[int, float] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _kind(self, cmdline: str) -> str | None:
        return next((kind for key, kind in self.KINDS if key in cmdline), None)

    def _sample(self) -> None:
        for p in psutil.process_iter(["pid", "cmdline", "cpu_times"]):
            kind = self._kind(" ".join(p.info["cmdline"] or []))
            if kind is None or p.info["cpu_times"] is None:
                continue
            t = p.info["cpu_times"].user + p.info["cpu_times"].system
            self._first.setdefault(p.info["pid"], t)
            self._last[p.info["pid"]] = (kind, t)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self._sample()

    def __enter__(self) -> CpuSampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, (kind, t) in self._last.items():
            out[kind] = out.get(kind, 0.0) + t - self._first[pid]
        return out


def cpu_per_mb(argv: list[str], bed: Bed, mb: int, what: str) -> None:
    with CpuSampler() as cpu:
        throughput_mb_s(argv, bed, mb)
    used = sorted(cpu.by_kind().items(), key=lambda kv: -kv[1])
    print(f"cpu ms per MB, {what}: " + ", ".join(f"{k} {v * 1e3 / mb:.1f}" for k, v in used))


def pct(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--interval-ms", type=float, default=10.0)
    ap.add_argument("--mb", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", choices=("latency", "throughput"), default=None)
    args = ap.parse_args()
    with testbed("process") as bed:
        lat = latency_job(args.lines, args.interval_ms / 1e3)
        latencies(submit_argv(["true"]), bed)  # warm: the daemon, its SSH connection, the code
        if args.only != "throughput":
            tcl_l: list[float] = []
            ssh_l: list[float] = []
            for _ in range(args.reps):  # interleaved
                tcl_l += latencies(submit_argv(lat), bed)
                ssh_l += latencies(ssh_argv(bed, lat), bed)
            t50, t99, s50, s99 = pct(tcl_l, 50), pct(tcl_l, 99), pct(ssh_l, 50), pct(ssh_l, 99)
            print(f"latency tcl submit: p50 {t50:.2f} ms  p99 {t99:.2f} ms  ({len(tcl_l)} lines)")
            print(f"latency ssh:        p50 {s50:.2f} ms  p99 {s99:.2f} ms  ({len(ssh_l)} lines)")
            print(f"ratio latency p50 tcl/ssh: {t50 / s50:.2f}  (goal: tcl p50 <= 5 ms)")
        if args.only != "latency":
            tput = throughput_job(args.mb)
            tcl_t, ssh_t = [], []
            for _ in range(args.reps):
                tcl_t.append(throughput_mb_s(submit_argv(tput), bed, args.mb))
                ssh_t.append(throughput_mb_s(ssh_argv(bed, tput), bed, args.mb))
            t, s = statistics.median(tcl_t), statistics.median(ssh_t)
            print(f"throughput tcl submit: {t:.1f} MB/s  {[round(x, 1) for x in tcl_t]}")
            print(f"throughput ssh:        {s:.1f} MB/s  {[round(x, 1) for x in ssh_t]}")
            print(f"ratio throughput tcl/ssh: {t / s:.2f}  (goal >= 0.9)")
            cpu_per_mb(submit_argv(tput), bed, args.mb, "tcl submit")
            cpu_per_mb(ssh_argv(bed, tput), bed, args.mb, "ssh")


if __name__ == "__main__":
    main()
