"""Warm `tcl submit` → first log line printed, against `ssh HOST docker run --rm IMAGE ...`.

Both run on the same testbed host (sshd on 127.0.0.1:2222, the runner image present, the shim
installed by `tcl host setup`), in the same run, interleaved. The ratio is tcl / baseline;
the issue's target is ≤ 1.5. `tcl submit` pays for more than the baseline does: a CLI start
(Python imports), a solver probe of the shim, a code snapshot, the task, the job spec and the
code upload, then following the log.

    uv run python bench/control_submit_latency.py [--reps 5]
"""

from __future__ import annotations

import argparse
import shlex
import statistics

from bench._controllib import TCL, testbed, time_to_line


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    with testbed() as bed:
        job = ["python3", "-c", "print('first-line', flush=True)"]
        tcl_argv = [TCL, "submit", "--chip", "h100", "-n", "1", "--", *job]
        remote = [
            "docker",
            "run",
            "--rm",
            "--entrypoint",
            "python3",
            bed.image,
            "-c",
            "print('first-line', flush=True)",
        ]
        base_argv = [*bed.ssh_argv(), shlex.join(remote)]  # ssh sends one shell string
        # warm-up: ssh connection files, image layers, page cache, the code tarball
        time_to_line(tcl_argv, bed.env(), bed.root, "first-line")
        time_to_line(base_argv, bed.env(), bed.root, "first-line")
        tcl_s, base_s = [], []
        for _ in range(args.reps):
            tcl_s.append(time_to_line(tcl_argv, bed.env(), bed.root, "first-line"))
            base_s.append(time_to_line(base_argv, bed.env(), bed.root, "first-line"))
        t, b = statistics.median(tcl_s), statistics.median(base_s)
        print(f"tcl submit -> first line:     median {t:.2f} s  {[round(x, 2) for x in tcl_s]}")
        print(f"ssh docker run -> first line: median {b:.2f} s  {[round(x, 2) for x in base_s]}")
        print(f"ratio tcl/baseline: {t / b:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
