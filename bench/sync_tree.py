"""`tcl sync` of a one-line change in a 20,000-file git repo, against `git status`.

A git repo of 20,000 small files is shipped (tarball, extracted into a "remote" dir, as a
runner holds it), its manifest taken and the stat cache filled. Then, each repetition, one
line of one file changes and we time the sync's local and remote work: ``scan`` (git ls-files
plus one lstat per file, re-hashing only the changed file), ``make_patch`` and
``TreeSync.apply`` on the remote copy. The baseline is `git status --porcelain` on the same
repo in the same run: the least any tool must do to notice the change. Target: sync under
0.3 s on a 2-core machine (medians over the repetitions). No network is involved.

    uv run python bench/sync_tree.py [--files 20000] [--reps 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from tcl.control.shipping import list_files, write_tarball
from tcl.control.treesync import make_patch, manifest_of_tarball, scan, tree_id
from tcl.runner.treepatch import TreeSync


def make_repo(root: Path, files: int) -> None:
    for i in range(files):
        d = root / f"pkg{i // 200:03d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i:05d}.py").write_text(f"VALUE = {i}\n" + "# filler line\n" * 20)
    git = ["git", "-C", str(root), "-c", "user.email=b@b", "-c", "user.name=b"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "bench"], check=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        repo, remote, tarball = Path(tmp) / "repo", Path(tmp) / "remote", Path(tmp) / "c.tgz"
        make_repo(repo, args.files)
        write_tarball(repo, list_files(repo, True)[0], tarball)
        remote.mkdir()
        with tarfile.open(tarball) as tar:
            tar.extractall(remote, filter="tar")
        base = manifest_of_tarball(tarball)
        # files just written are "racy" (their mtime may not change on the next write):
        # age them, as a tree edited a while ago is, so the stat cache holds every file
        old = time.time_ns() - 3_600_000_000_000
        for p in base.files:
            os.utime(repo / p, ns=(old, old))
        base = scan(repo, True, base)
        ts = TreeSync(remote, tree_id(base))
        git_times: list[float] = []
        scans: list[float] = []
        patches: list[float] = []
        applies: list[float] = []
        for rep in range(args.reps):
            target = repo / "pkg050" / f"mod{10000 + rep:05d}.py"
            target.write_text(target.read_text().replace("VALUE =", "VALUE = 1 +"))
            t0 = time.perf_counter()
            subprocess.run(
                ["git", "-C", str(repo), "status", "--porcelain"], check=True, capture_output=True
            )
            t1 = time.perf_counter()
            now = scan(repo, True, base)
            t2 = time.perf_counter()
            patch = make_patch(repo, base, now)
            t3 = time.perf_counter()
            assert patch is not None and len(patch.files) == 1, patch
            ack = ts.apply(patch)
            t4 = time.perf_counter()
            assert ack.applied == 1 and (remote / target.relative_to(repo)).read_bytes() == (
                target.read_bytes()
            )
            git_times.append(t1 - t0)
            scans.append(t2 - t1)
            patches.append(t3 - t2)
            applies.append(t4 - t3)
            base = now
        med = statistics.median
        sync = [s + p + a for s, p, a in zip(scans, patches, applies, strict=True)]
        print(f"repo: {args.files} files, {args.reps} one-line changes")
        print(f"git status --porcelain: median {med(git_times) * 1000:.1f} ms")
        print(
            f"sync: median {med(sync) * 1000:.1f} ms = scan {med(scans) * 1000:.1f} ms"
            f" + make_patch {med(patches) * 1000:.2f} ms + apply {med(applies) * 1000:.2f} ms"
        )
        print(f"ratio sync/git status: {med(sync) / med(git_times):.2f} (target: sync < 300 ms)")


if __name__ == "__main__":
    main()
