"""A 200 MB / 20,000-file repo: its first submit against a plain copy over the same SSH, and
its re-submit unchanged against its first submit.

A git repo of 20,000 files of 10 KiB random bytes (incompressible) is submitted twice with
`tcl submit -d` (which returns once the job runs) to a testbed host. The first submit
snapshots, compresses and uploads the tree; the second finds the tarball by its manifest and
the host's cache by its hash, so no code crosses the network. Each repetition first commits one
new file, so its first submit ships a tree the host has never seen. Target: ratio ≤ 0.1
(medians over the repetitions).

The first submit's baseline (issue 29: `rsync -a` over the same SSH, goal ≤ 1.5): `tar c` of
the same tree (its `.git` left out, as a submit leaves it) piped through `ssh HOST tar x` into
a new directory, run in the same repetition. rsync is not installed on the test machines; its
first copy of a tree does what this pipe does, with checksums besides.

    uv run python bench/control_resubmit.py [--files 20000] [--file-kib 10] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import time
from pathlib import Path

from bench._controllib import Bed, testbed


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


def tar_over_ssh(bed: Bed, repo: Path, dest: Path) -> float:
    """Seconds to copy ``repo``'s tree (no ``.git``) into ``dest`` on the host, over its SSH."""
    t0 = time.perf_counter()
    tar = subprocess.Popen(
        ["tar", "-C", str(repo), "--exclude=./.git", "-cf", "-", "."], stdout=subprocess.PIPE
    )
    remote = shlex.join(["sh", "-c", 'mkdir -p "$1" && tar -C "$1" -xf -', "-", str(dest)])
    subprocess.run([*bed.ssh_argv(), remote], stdin=tar.stdout, check=True)
    assert tar.stdout is not None
    tar.stdout.close()
    if tar.wait() != 0:
        raise SystemExit("tar failed")
    return time.perf_counter() - t0


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
        copies: list[float] = []
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
            copies.append(tar_over_ssh(bed, repo, bed.root / f"copy-{rep}"))
        mb = args.files * args.file_kib / 1024
        tar_mib = results[0]["code"]["bytes"] / 2**20
        first, second = statistics.median(firsts), statistics.median(seconds)
        print(f"repo: {args.files} files, {mb:.0f} MiB; tarball {tar_mib:.0f} MiB")
        print(f"first submit -> running:  median {first:.2f} s {[round(t, 2) for t in firsts]}")
        print(f"second submit -> running: median {second:.2f} s {[round(t, 2) for t in seconds]}")
        print(f"ratio second/first: {second / first:.3f} (target <= 0.1)")
        copy = statistics.median(copies)
        print(f"tar | ssh tar x:          median {copy:.2f} s {[round(t, 2) for t in copies]}")
        print(f"ratio first submit / copy over ssh: {first / copy:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
