"""Re-submit of an unchanged 200 MB / 20,000-file repo: time to running vs the first submit.

A git repo of 20,000 files of 10 KiB random bytes (incompressible) is submitted twice with
`tcl submit -d` (which returns once the job runs) to a testbed host. The first submit
snapshots, compresses and uploads the tree; the second finds the tarball by its manifest and
the host's cache by its hash, so no code crosses the network. Target: ratio ≤ 0.1.

    uv run python bench/control_resubmit.py [--files 20000] [--file-kib 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time

from bench._controllib import testbed


def make_repo(path: os.PathLike[str], files: int, kib: int) -> None:
    os.makedirs(path)
    for i in range(files):
        d = os.path.join(path, f"d{i // 500:03d}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:05d}.bin"), "wb") as f:
            f.write(os.urandom(kib * 1024))
    git = ["git", "-C", str(path), "-c", "user.email=b@b", "-c", "user.name=b"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "bench"], check=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--file-kib", type=int, default=10)
    args = ap.parse_args()
    with testbed() as bed:
        repo = bed.root / "repo"
        make_repo(repo, args.files, args.file_kib)
        bed.config.write_text(bed.config.read_text() + "shipping: {max_bytes: 1000000000}\n")
        times, results = [], []
        for _ in range(2):
            t0 = time.perf_counter()
            res = bed.tcl("submit", "-d", "--json", "--", "true", cwd=repo)
            times.append(time.perf_counter() - t0)
            results.append(json.loads(res.stdout))
        mb = args.files * args.file_kib / 1024
        tar_mib = results[0]["code"]["bytes"] / 2**20
        print(f"repo: {args.files} files, {mb:.0f} MiB; tarball {tar_mib:.0f} MiB")
        print(f"first submit -> running:  {times[0]:.2f} s (uploaded "
              f"{results[0]['code']['uploaded_bytes'] / 2**20:.0f} MiB)")  # fmt: skip
        print(f"second submit -> running: {times[1]:.2f} s (uploaded "
              f"{results[1]['code']['uploaded_bytes']} bytes)")  # fmt: skip
        print(f"ratio second/first: {times[1] / times[0]:.3f} (target <= 0.1)")


if __name__ == "__main__":
    main()
