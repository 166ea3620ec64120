"""Code shipping: a git-aware, deterministic, content-addressed snapshot of the user's tree.

Inside a git work tree the snapshot holds every file git knows (tracked, with its working-tree
content, so uncommitted edits are in) plus untracked files that ``.gitignore`` does not ignore;
``.tclignore`` then removes more. Outside git it walks the directory with ``.tclignore`` only:
never ``/`` or ``$HOME`` unless asked for explicitly, never into another file system (``/proc``),
and unreadable directories and files are skipped and counted.
The tarball is byte-for-byte deterministic (sorted names, zeroed times and owners, normalised
modes, gzip mtime 0), so its sha256 names the content. A manifest of (path, size, mtime, mode)
maps to the last tarball built for it, so re-submitting an unchanged tree costs one ``stat`` per
file and no compression.

It is gzipped (level 1) unless a sample of its bytes shows gzip would not shrink it (random
data, checkpoints, images, archives: compressing them ran at ~30 MB/s for no gain, most of a
large first submit): then it is a plain tar. Its name stays ``<sha256>.tar.gz`` wherever it
goes; every reader detects which it is (``tarfile``'s ``r:*`` and ``r|*``).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
import json
import os
import secrets
import stat
import subprocess
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from tcl.atomic import private_opener, write_atomic
from tcl.control.errors import CodeTooLargeError, ShippingError
from tcl.control.ignore import IgnoreRules
from tcl.control.paths import private_dir

_GZIP_LEVEL = 1  # code is re-shipped often; speed beats ratio here
# Whether to gzip a tree at all: SAMPLES slices of SAMPLE_BYTES, spread over its bytes, are
# compressed at _GZIP_LEVEL; kept over INCOMPRESSIBLE of their size, the tar is left plain. A
# tree under ALWAYS_GZIP_BYTES is gzipped whatever it holds (it takes little time either way).
SAMPLES = 16
SAMPLE_BYTES = 64 * 1024
INCOMPRESSIBLE = 0.9
ALWAYS_GZIP_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class FileEntry:
    rel: str  # POSIX path relative to the root
    size: int
    mtime_ns: int
    mode: int  # st_mode
    link: str | None = None  # symlink target


@dataclass(frozen=True)
class Snapshot:
    root: Path
    tarball: Path  # the cached tar.gz
    sha256: str
    size: int  # bytes of the tar.gz
    files: int
    content_bytes: int  # uncompressed file bytes
    git: bool
    unreadable: int = 0  # directories and files skipped outside git: no permission to read


def find_root(start: Path) -> tuple[Path, bool]:
    """The git top level containing ``start`` (and True), or ``start`` itself (and False)."""
    try:
        proc = subprocess.run(
            ["git", "-C", str(start), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:  # no git binary: a plain directory
        return start.resolve(), False
    if proc.returncode == 0 and proc.stdout.strip():
        return Path(proc.stdout.strip()).resolve(), True
    return start.resolve(), False


def _git_paths(root: Path) -> list[str]:
    proc = subprocess.run(
        ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ShippingError(f"git ls-files failed in {root}: {proc.stderr.decode().strip()}")
    return sorted({p.decode() for p in proc.stdout.split(b"\0") if p})


def _walk_paths(root: Path, rules: IgnoreRules) -> tuple[list[str], int]:
    """Files under ``root`` (not ``.git``, not ignored, on root's file system, readable) and how
    many directories and files were skipped because they could not be read."""
    out: list[str] = []
    unreadable = 0
    device = root.stat().st_dev
    stack = [""]
    while stack:
        prefix = stack.pop()
        try:
            with os.scandir(root / prefix if prefix else root) as it:
                entries = list(it)
        except OSError:  # no permission, or gone meanwhile
            unreadable += 1
            continue
        for entry in entries:
            rel = prefix + entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                unreadable += 1
                continue
            if stat.S_ISDIR(st.st_mode):
                if entry.name == ".git" or st.st_dev != device or rules.ignored(rel, is_dir=True):
                    continue  # another file system (/proc, a mount): never crossed
                stack.append(rel + "/")
            elif stat.S_ISLNK(st.st_mode):
                out.append(rel)
            elif stat.S_ISREG(st.st_mode):
                if os.access(entry.path, os.R_OK):
                    out.append(rel)
                else:
                    unreadable += 1
    return sorted(out), unreadable


def _refused_root(root: Path) -> bool:
    """``/`` and the home directory are never walked without an explicit request."""
    home = os.environ.get("HOME")
    return root == Path(root.anchor) or (bool(home) and root == Path(str(home)).resolve())


def list_files(root: Path, git: bool) -> tuple[list[FileEntry], int]:
    """Every regular file and symlink to ship, sorted, ``.tclignore`` applied; and how many
    unreadable directories and files a walk outside git skipped."""
    rules = IgnoreRules.from_dir(root)
    paths, unreadable = (_git_paths(root), 0) if git else _walk_paths(root, rules)
    entries: list[FileEntry] = []
    prefix = os.path.join(root, "")  # string joins: a Path per file costs more than its lstat
    for rel in paths:
        if rel.startswith(".git/") or (rules and rules.ignored(rel)):
            continue
        try:
            st = os.lstat(prefix + rel)
        except FileNotFoundError:  # tracked but deleted in the work tree
            continue
        if stat.S_ISLNK(st.st_mode):
            entries.append(FileEntry(rel, 0, st.st_mtime_ns, st.st_mode, os.readlink(prefix + rel)))
        elif stat.S_ISREG(st.st_mode):
            entries.append(FileEntry(rel, st.st_size, st.st_mtime_ns, st.st_mode))
        # directories (submodules), sockets, devices: never shipped
    return entries, unreadable


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def check_size(entries: list[FileEntry], max_bytes: int) -> int:
    total = sum(e.size for e in entries)
    if total > max_bytes:
        largest = sorted(entries, key=lambda e: (-e.size, e.rel))[:5]
        listing = ", ".join(f"{e.rel} ({_human(e.size)})" for e in largest)
        raise CodeTooLargeError(
            f"code snapshot is {_human(total)}, over the limit of {_human(max_bytes)} "
            f"(shipping.max_bytes); largest files: {listing}. "
            "Add them to .tclignore (or .gitignore) or raise the limit."
        )
    return total


def _manifest_key(root: Path, entries: list[FileEntry]) -> str:
    h = hashlib.sha256(str(root).encode())
    for e in entries:
        h.update(f"{e.rel}\0{e.size}\0{e.mtime_ns}\0{e.mode}\0{e.link}\n".encode())
    return h.hexdigest()


def _tarinfo(e: FileEntry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(e.rel)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if e.link is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = e.link
        info.mode = 0o777
    else:
        info.size = e.size
        info.mode = 0o755 if e.mode & 0o111 else 0o644
    return info


def write_tarball(
    root: Path,
    entries: list[FileEntry],
    dest: Path,
    content: Callable[[FileEntry], BinaryIO] | None = None,
) -> str:
    """Write the deterministic tarball to ``dest`` (atomically; gzipped when
    :func:`worth_compressing`); return its sha256. Each file's bytes come from ``content``
    (default: the file under ``root``)."""

    def read(e: FileEntry) -> BinaryIO:
        return content(e) if content else open(root / e.rel, "rb")

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()

    class _Hashing(io.RawIOBase):
        def __init__(self, f: io.BufferedWriter) -> None:
            self.f = f
            self.written = 0

        def writable(self) -> bool:
            return True

        def tell(self) -> int:  # a plain tar's writer asks where it starts
            return self.written

        def write(self, b: bytes) -> int:  # type: ignore[override]
            digest.update(b)
            self.written += len(b)
            return self.f.write(b)

    try:
        compress = worth_compressing(entries, read)
        with open(tmp, "wb", opener=private_opener) as raw:
            sink = _Hashing(raw)
            with contextlib.ExitStack() as stack:
                out: gzip.GzipFile | _Hashing = sink
                if compress:
                    out = stack.enter_context(
                        gzip.GzipFile(fileobj=sink, mode="wb", mtime=0, compresslevel=_GZIP_LEVEL)
                    )
                tar = stack.enter_context(
                    tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT)
                )
                for e in entries:
                    info = _tarinfo(e)
                    if e.link is not None:
                        tar.addfile(info)
                        continue
                    with read(e) as f:
                        tar.addfile(info, f)
            raw.flush()
            os.fsync(raw.fileno())
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ShippingError(f"cannot write the code snapshot: {e}") from None
    sha = digest.hexdigest()
    os.replace(tmp, dest)
    return sha


def worth_compressing(entries: list[FileEntry], read: Callable[[FileEntry], BinaryIO]) -> bool:
    """Whether gzip would shrink the tree's tarball: the files holding each SAMPLES-th of its
    bytes give a slice each (their first SAMPLE_BYTES), compressed as the tarball would be.
    Deterministic (the same tree, the same answer): the tarball's hash names its content."""
    files = [e for e in entries if e.link is None and e.size > 0]
    total = sum(e.size for e in files)
    if total < ALWAYS_GZIP_BYTES:
        return True
    picked: list[FileEntry] = []  # a file holding several marks gives one slice
    at = mark = 0  # where the file starts in the tree's bytes; the next mark's index
    for e in files:
        if mark < SAMPLES and total * mark // SAMPLES < at + e.size:
            picked.append(e)
            while mark < SAMPLES and total * mark // SAMPLES < at + e.size:
                mark += 1
        at += e.size
    raw = packed = 0
    for e in picked:
        with read(e) as f:
            data = f.read(SAMPLE_BYTES)
        raw += len(data)
        packed += len(zlib.compress(data, _GZIP_LEVEL))
    return packed < INCOMPRESSIBLE * raw


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)  # used now: eviction goes by mtime, least recently used first


def evict_cache(cache_dir: Path, max_bytes: int, keep: str) -> list[Path]:
    """Remove least recently used tarballs (by mtime, touched on use) from ``cache_dir`` until
    the rest fit in ``max_bytes``; never the one named ``keep`` (its sha256, in use now).
    Index entries pointing at a removed tarball are left: a lookup finds it gone and rebuilds.
    """
    found: list[tuple[float, int, Path]] = []
    for path in cache_dir.glob("*.tar.gz"):
        if path.name.startswith("."):
            continue  # a build in progress
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        found.append((st.st_mtime, st.st_size, path))
    total = sum(size for _, size, _ in found)
    evicted: list[Path] = []
    for _, size, path in sorted(found):
        if total <= max_bytes:
            break
        if path.name == f"{keep}.tar.gz":
            continue
        with contextlib.suppress(FileNotFoundError):  # another tcl evicted it first
            path.unlink()
        total -= size
        evicted.append(path)
    return evicted


def snapshot(
    start: Path,
    cache_dir: Path,
    max_bytes: int,
    cache_max_bytes: int | None = None,
    *,
    explicit: bool = False,
) -> Snapshot:
    """Snapshot the tree around ``start`` into ``cache_dir``; reuse the tarball when unchanged.

    ``explicit``: the user named ``start`` (``--dir``), so even ``/`` or ``$HOME`` is walked.
    With ``cache_max_bytes``, least recently used tarballs beyond it are evicted afterwards."""
    snap = _snapshot(start, cache_dir, max_bytes, explicit)
    _touch(snap.tarball)
    if cache_max_bytes is not None:
        evict_cache(cache_dir, cache_max_bytes, keep=snap.sha256)
    return snap


def _snapshot(start: Path, cache_dir: Path, max_bytes: int, explicit: bool) -> Snapshot:
    root, git = find_root(start)
    if not git and not explicit and _refused_root(root):
        raise ShippingError(
            f"not in a git repository, and {root} is too broad to ship: cd to your project "
            "or pass --dir DIR to ship a directory explicitly"
        )
    entries, unreadable = list_files(root, git)
    total = check_size(entries, max_bytes)
    index = private_dir(cache_dir / "index")
    key = _manifest_key(root, entries)
    known = index / f"{key}.json"
    if known.is_file():
        try:
            rec = json.loads(known.read_text())
            tarball = cache_dir / f"{rec['sha256']}.tar.gz"
            if tarball.is_file():
                size = tarball.stat().st_size
                return Snapshot(
                    root, tarball, rec["sha256"], size, len(entries), total, git, unreadable
                )
        except (ValueError, KeyError, OSError):
            pass  # a damaged index entry: rebuild
    # unique per caller: concurrent submits of one tree each build, and the renames all land
    # the same content-addressed tarball
    building = cache_dir / f".building-{key[:16]}-{secrets.token_hex(8)}.tar.gz"
    sha = write_tarball(root, entries, building)
    tarball = cache_dir / f"{sha}.tar.gz"
    os.replace(building, tarball)
    write_atomic(known, json.dumps({"version": 1, "sha256": sha}))
    size = tarball.stat().st_size
    return Snapshot(root, tarball, sha, size, len(entries), total, git, unreadable)


def cached_snapshot(cache_dir: Path, sha256: str) -> Snapshot:
    """A snapshot shipped before, from the local cache by its sha256 (a run placed again)."""
    tarball = cache_dir / f"{sha256}.tar.gz"
    try:
        size = tarball.stat().st_size
    except OSError:
        raise ShippingError(
            f"code {sha256[:12]} is no longer in the local cache ({cache_dir}): submit again"
        ) from None
    _touch(tarball)
    return Snapshot(tarball.parent, tarball, sha256, size, 0, 0, True)
