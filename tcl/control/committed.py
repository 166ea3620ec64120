"""``--committed``: ship the repository's HEAD as committed, not the working tree.

The files of HEAD's tree (``git ls-tree``), their bytes from git's objects (one ``git cat-file
--batch`` for all of them), ``.tclignore`` applied, in the same deterministic tar.gz as a
working-tree snapshot (:mod:`tcl.control.shipping`), cached by commit. What the working tree
holds that HEAD does not (edits, new files) is listed for the user: it is not shipped."""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import stat
import subprocess
from pathlib import Path
from typing import BinaryIO

from tcl.atomic import write_atomic
from tcl.control.errors import ShippingError
from tcl.control.ignore import IgnoreRules
from tcl.control.paths import private_dir
from tcl.control.shipping import FileEntry, Snapshot, check_size, find_root, write_tarball

_MODES = {"100644": stat.S_IFREG | 0o644, "100755": stat.S_IFREG | 0o755}
_LINK = "120000"


def _git(root: Path, *args: str) -> bytes:
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=False)
    if proc.returncode != 0:
        raise ShippingError(f"git {args[0]} failed in {root}: {proc.stderr.decode().strip()}")
    return proc.stdout


def head_commit(root: Path) -> str:
    try:
        return _git(root, "rev-parse", "--verify", "HEAD^{commit}").decode().strip()
    except ShippingError:
        raise ShippingError(f"--committed: {root} has no commit yet (nothing to ship)") from None


def uncommitted(root: Path) -> list[str]:
    """``git status --short`` lines: what the working tree has that HEAD does not."""
    out = _git(root, "status", "--porcelain=v1", "-z", "--untracked-files=normal")
    return [line.decode(errors="replace") for line in out.split(b"\0") if line]


def _head_files(root: Path) -> list[tuple[FileEntry, str]]:
    """HEAD's files (submodules left out) and the object holding each one's bytes."""
    out = _git(root, "ls-tree", "-r", "-z", "-l", "--full-tree", "HEAD")
    rules = IgnoreRules.from_dir(root)
    files: list[tuple[FileEntry, str]] = []
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, kind, sha, size = meta.decode().split()
        rel = path.decode("utf-8", errors="surrogateescape")
        if kind != "blob" or (rules and rules.ignored(rel)):
            continue
        if mode == _LINK:
            files.append((FileEntry(rel, 0, 0, stat.S_IFLNK | 0o777, link=""), sha))
        else:
            files.append((FileEntry(rel, int(size), 0, _MODES.get(mode, _MODES["100644"])), sha))
    return sorted(files, key=lambda f: f[0].rel)


class _Objects:
    """Blobs by object name, through one ``git cat-file --batch``, in the order asked for."""

    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen(
            ["git", "-C", str(root), "cat-file", "--batch"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def read(self, sha: str) -> bytes:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(f"{sha}\n".encode())
        stdin.flush()
        header = stdout.readline().split()
        if len(header) != 3:
            raise ShippingError(f"git cat-file: no object {sha}")
        data = stdout.read(int(header[2]))
        stdout.read(1)  # the newline after each object
        return data

    def close(self) -> None:
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        self.proc.wait(10)


def committed_snapshot(start: Path, cache_dir: Path, max_bytes: int) -> Snapshot:
    """HEAD of the repository around ``start``, as a snapshot (cached by commit and
    ``.tclignore``)."""
    root, git = find_root(start)
    if not git:
        raise ShippingError(f"--committed: {root} is not in a git repository")
    commit = head_commit(root)
    rules = (root / ".tclignore").read_bytes() if (root / ".tclignore").is_file() else b""
    key = f"commit-{commit}-{hashlib.sha256(rules).hexdigest()[:16]}"
    index = private_dir(cache_dir / "index")
    known = index / f"{key}.json"
    files = _head_files(root)
    total = check_size([f for f, _ in files], max_bytes)
    if known.is_file():
        try:
            sha = json.loads(known.read_text())["sha256"]
            tarball = cache_dir / f"{sha}.tar.gz"
            if tarball.is_file():
                size = tarball.stat().st_size
                return Snapshot(root, tarball, sha, size, len(files), total, True)
        except (ValueError, KeyError, OSError):
            pass
    objs = {f.rel: obj for f, obj in files}
    objects = _Objects(root)
    try:
        entries = [
            # a link's target is its blob
            FileEntry(f.rel, 0, 0, f.mode, link=objects.read(obj).decode(errors="surrogateescape"))
            if f.link is not None
            else f
            for f, obj in files
        ]

        def content(e: FileEntry) -> BinaryIO:
            return io.BytesIO(objects.read(objs[e.rel]))

        building = cache_dir / f".building-{key[:24]}-{secrets.token_hex(8)}.tar.gz"
        sha = write_tarball(root, entries, building, content)
    finally:
        objects.close()
    tarball = cache_dir / f"{sha}.tar.gz"
    building.replace(tarball)
    write_atomic(known, json.dumps({"version": 1, "sha256": sha}))
    return Snapshot(root, tarball, sha, tarball.stat().st_size, len(entries), total, True)
