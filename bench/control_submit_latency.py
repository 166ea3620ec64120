"""Warm `tcl submit` → first log line printed, against `ssh HOST docker run --rm IMAGE ...`
(`--executor process`: against `ssh HOST python3 -c ...`, the shim's process executor).

Both run on the same testbed host (sshd on 127.0.0.1:2222, the runner image present, the shim
installed by `tcl host setup`), in the same run, interleaved. The ratio is tcl / baseline;
issue 29's goals: ≤ 1.3 (docker), ≤ 1.5 (process). `tcl submit` pays for more than the
baseline does: a CLI start (Python imports), a solver probe of the shim, a code snapshot, the
task, the job spec and the code upload, then following the log.

    uv run python bench/control_submit_latency.py [--reps 5] [--executor docker|process]
"""

from __future__ import annotations

import argparse
import shlex

from bench._controllib import TCL, interleaved_first_lines, print_ratio, testbed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--executor", choices=("docker", "process"), default="docker")
    args = ap.parse_args()
    with testbed(args.executor) as bed:
        job = ["python3", "-c", "print('first-line', flush=True)"]
        tcl_argv = [TCL, "submit", "--chip", "h100", "-n", "1", "--", *job]
        remote = job
        if args.executor == "docker":
            remote = ["docker", "run", "--rm", "--entrypoint", "python3", bed.image, *job[1:]]
        base_argv = [*bed.ssh_argv(), shlex.join(remote)]  # ssh sends one shell string
        # warm-up: ssh connection files, image layers, page cache, the code tarball
        tcl_s, base_s = interleaved_first_lines(
            tcl_argv, base_argv, bed.env(), bed.work, args.reps, warm=1
        )
        if args.executor == "docker":
            print_ratio("ssh docker run", tcl_s, base_s, 1.3)
        else:
            print_ratio("ssh python3 -c", tcl_s, base_s, 1.5)


if __name__ == "__main__":
    main()
