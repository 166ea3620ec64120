"""Re-submit of an unchanged 200 MB / 20,000-file repo: time to running vs the first submit.

A git repo of 20,000 files of 10 KiB random bytes (incompressible) is submitted twice with
`tcl submit -d` (which returns once the job runs) to a testbed host. The first submit
snapshots, compresses and uploads the tree; the second finds the tarball by its manifest and
the host's cache by its hash, so no code crosses the network. Each repetition first commits one
new file, so its first submit ships a tree the host has never seen. Target: ratio ≤ 0.1
(medians over the repetitions).

    uv run python bench/control_resubmit.py [--files 20000] [--file-kib 10] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
    _commit(path)


def _commit(path: os.PathLike[str]) -> None:
    git = ["git", "-C", str(path), "-c", "user.email=b@b", "-c", "user.name=b"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "bench"], check=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--file-kib", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    with testbed() as bed:
        repo = bed.root / "repo"
        make_repo(repo, args.files, args.file_kib)
        bed.config.write_text(bed.config.read_text() + "shipping: {max_bytes: 1000000000}\n")
        firsts: list[float] = []
        seconds: list[float] = []
        for rep in range(args.reps):
            (repo / f"rep-{rep}.bin").write_bytes(os.urandom(args.file_kib * 1024))
            _commit(repo)
            results = []
            for times in (firsts, seconds):
                t0 = time.perf_counter()
                res = bed.tcl("submit", "-d", "--json", "--", "true", cwd=repo)
                times.append(time.perf_counter() - t0)
                results.append(json.loads(res.stdout))
            assert results[0]["code"]["uploaded_bytes"] > 0, results[0]
            assert results[1]["code"]["uploaded_bytes"] == 0, results[1]
        mb = args.files * args.file_kib / 1024
        tar_mib = results[0]["code"]["bytes"] / 2**20
        first, second = statistics.median(firsts), statistics.median(seconds)
        print(f"repo: {args.files} files, {mb:.0f} MiB; tarball {tar_mib:.0f} MiB")
        print(f"first submit -> running:  median {first:.2f} s {[round(t, 2) for t in firsts]}")
        print(f"second submit -> running: median {second:.2f} s {[round(t, 2) for t in seconds]}")
        print(f"ratio second/first: {second / first:.3f} (target <= 0.1)")


if __name__ == "__main__":
    main()
