"""The workstation side of `tcl sync`: what the tree holds, and the patch from a base to now.

A ``Manifest`` maps each shipped path to its content hash and permission bits (normalised as
the tarball writes them: 0o755 or 0o644, 0o777 for a link), plus the (size, mtime) it was
hashed at, so the next ``scan`` re-hashes only files whose stat changed, as git's index does.
The first base comes from the shipped tarball itself, so it is exactly what the remote holds.
``make_patch`` turns two manifests into a ``SyncPatch`` for ``tcl.runner.treepatch``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from tcl.atomic import write_atomic
from tcl.control.errors import SyncError
from tcl.control.shipping import list_files
from tcl.runner.api import SyncFile, SyncPatch
from tcl.runner.treepatch import patch_id

VERSION = 1
MAX_PATCH_BYTES = 64 << 20  # file data in one patch: an interactive sync, not a re-ship
LINK_MODE = 0o777  # as the tarball writes a symlink
# A file modified within this long of its hashing may change again within the same mtime
# tick (ext4 stamps with a coarse clock): its stat is not trusted next time ("racy git").
_RACY_NS = 2_000_000_000
_CHUNK = 1 << 20


class Entry(NamedTuple):  # a tuple: tens of thousands are built per scan
    sha256: str
    mode: int  # normalised permission bits
    size: int | None = None  # None: not known (from a tarball), hash again on the next scan
    mtime_ns: int | None = None
    link: str | None = None  # symlink target


@dataclass
class Manifest:
    """Treated as immutable once built: its tree id is computed once."""

    files: dict[str, Entry] = field(default_factory=dict)
    _id: str | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "files": {
                p: [e.sha256, e.mode, e.size, e.mtime_ns, e.link] for p, e in self.files.items()
            },
        }

    @classmethod
    def from_json(cls, doc: Any) -> Manifest:
        """Raises ValueError/KeyError/TypeError on a malformed document (callers name it)."""
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise ValueError(f"not a version {VERSION} manifest")
        files: dict[str, Entry] = {}
        for p, (sha, mode, size, mtime_ns, link) in doc["files"].items():
            if not isinstance(sha, str) or not isinstance(mode, int):
                raise TypeError(f"bad entry for {p!r}")
            files[p] = Entry(sha, mode, size, mtime_ns, link)
        return cls(files)


def file_mode(st_mode: int) -> int:
    """The permission bits the tarball ships (and the runner extracts) for a regular file."""
    return 0o755 if st_mode & 0o111 else 0o644


def _sha_link(target: str) -> str:
    return hashlib.sha256(target.encode()).hexdigest()


def _sha_path(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def tree_id(manifest: Manifest) -> str:
    """The id of a tree's content: a sha256 over the sorted (path, sha256, mode)."""
    if manifest._id is not None:
        return manifest._id
    files = manifest.files
    text = "".join(f"{p}\0{files[p].sha256}\0{files[p].mode:o}\n" for p in sorted(files))
    manifest._id = hashlib.sha256(text.encode()).hexdigest()
    return manifest._id


def manifest_of_tarball(tarball: Path) -> Manifest:
    """The manifest of a shipped code tarball: exactly what the remote working dir starts with."""
    files: dict[str, Entry] = {}
    try:
        with tarfile.open(tarball, "r:*") as tar:
            for info in tar:
                name = info.name.removeprefix("./")
                if info.issym():
                    files[name] = Entry(_sha_link(info.linkname), LINK_MODE, link=info.linkname)
                elif info.isfile():
                    f = tar.extractfile(info)
                    assert f is not None  # a regular member always has a file object
                    h = hashlib.sha256()
                    while chunk := f.read(_CHUNK):
                        h.update(chunk)
                    files[name] = Entry(h.hexdigest(), file_mode(info.mode))
    except (OSError, tarfile.TarError) as e:
        raise SyncError(f"cannot read the shipped code {tarball}: {e}") from None
    return Manifest(files)


def scan(root: Path, git: bool, previous: Manifest | None) -> Manifest:
    """The manifest of the tree now: the files a submit ships, re-hashing only those whose
    (size, mtime, mode) differ from ``previous``."""
    entries, _ = list_files(root, git)
    old = previous.files if previous is not None else {}
    racy = time.time_ns() - _RACY_NS
    files: dict[str, Entry] = {}
    for e in entries:
        if e.link is not None:
            files[e.rel] = Entry(_sha_link(e.link), LINK_MODE, 0, e.mtime_ns, e.link)
            continue
        mode = file_mode(e.mode)
        prev = old.get(e.rel)
        if (
            prev is not None
            and prev.link is None
            and prev.size == e.size
            and prev.mtime_ns == e.mtime_ns
        ):
            files[e.rel] = prev if prev.mode == mode else prev._replace(mode=mode)
            continue
        try:
            sha = _sha_path(root / e.rel)
        except FileNotFoundError:
            continue  # deleted since it was listed: as if it was never there
        except OSError as err:
            raise SyncError(f"cannot read {root / e.rel}: {err}") from None
        mtime = e.mtime_ns if e.mtime_ns < racy else None
        files[e.rel] = Entry(sha, mode, e.size, mtime)
    return Manifest(files)


def _human(n: float) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB"


def _by_sha(base: Manifest) -> dict[str, str]:
    """A base path for each regular file content; the first path in order wins."""
    by_sha: dict[str, str] = {}
    for p in sorted(base.files, reverse=True):
        e = base.files[p]
        if e.link is None:
            by_sha[e.sha256] = p
    return by_sha


def make_patch(
    root: Path, base: Manifest, now: Manifest, max_bytes: int = MAX_PATCH_BYTES
) -> SyncPatch | None:
    """The patch taking a remote tree at ``base`` to ``now`` (None: nothing changed). A new
    file with the content of a base file is sent as a copy of it (a rename, a copy), not as
    data: the runner reads every copy source before it changes anything."""
    by_sha: dict[str, str] | None = None
    files: list[SyncFile] = []
    data: list[tuple[str, int]] = []  # (path, size) to send as data
    for p, gone in base.files.items():
        if p not in now.files:
            files.append(SyncFile(path=p, old_sha256=gone.sha256, sha256=None))
    for p, e in now.files.items():
        was = base.files.get(p)
        if was is e:  # scan reuses an unchanged entry: no need to compare its fields
            continue
        if was is not None and (was.sha256, was.mode, was.link) == (e.sha256, e.mode, e.link):
            continue
        old = was.sha256 if was is not None else None
        src: str | None = None
        if e.link is None and was is not None and was.link is None and was.sha256 == e.sha256:
            src = p  # a mode change: the runner copies the file onto itself
        elif was is None and e.link is None and (e.size or 0) > 0:  # a rename or copy?
            if by_sha is None:  # built on the first new content only: most syncs edit
                by_sha = _by_sha(base)
            src = by_sha.get(e.sha256)
        if e.link is None and src is None:
            data.append((p, e.size or 0))
            continue
        files.append(
            SyncFile(
                path=p, old_sha256=old, sha256=e.sha256, mode=e.mode, copy_from=src, link=e.link
            )
        )
    total = sum(size for _, size in data)
    if total > max_bytes:
        largest = sorted(data, key=lambda d: (-d[1], d[0]))[:5]
        listing = ", ".join(f"{p} ({_human(s)})" for p, s in largest)
        raise SyncError(
            f"the change is {_human(total)} of file data, over the sync limit of "
            f"{_human(max_bytes)}; largest: {listing}. Submit again to ship it instead."
        )
    for p, _ in data:
        try:
            raw = (root / p).read_bytes()
        except OSError as err:
            raise SyncError(f"cannot read {root / p}: {err}") from None
        sha = now.files[p].sha256
        if hashlib.sha256(raw).hexdigest() != sha:
            raise SyncError(f"{p} changed while syncing: run tcl sync again")
        was = base.files.get(p)
        files.append(
            SyncFile(
                path=p,
                old_sha256=was.sha256 if was is not None else None,
                sha256=sha,
                mode=now.files[p].mode,
                data_b64=base64.b64encode(raw).decode(),
            )
        )
    if not files:
        return None
    files.sort(key=lambda f: f.path)
    base_id, new_id = tree_id(base), tree_id(now)
    return SyncPatch(
        id=patch_id(base_id, new_id, files), base=base_id, new_base=new_id, files=files
    )


def changed_modules(patch: SyncPatch, job_cwd: str) -> list[str]:
    """Dotted names of the ``.py`` files a patch adds or changes, as the job imports them:
    relative to its cwd (``job_cwd``, relative to the tree root, "" the root) where they are
    below it, else relative to the root (a best guess). Names that no import statement could
    spell (``my-script.py``) are left out."""
    cwd = posixpath.normpath(job_cwd.strip("/") or ".")
    prefix = "" if cwd == "." else cwd + "/"
    names: set[str] = set()
    for f in patch.files:
        if f.sha256 is None or not f.path.endswith(".py"):
            continue
        rel = f.path.removeprefix(prefix) if prefix and f.path.startswith(prefix) else f.path
        parts = rel[: -len(".py")].split("/")
        if parts[-1] == "__init__":
            parts.pop()
        if parts and all(p.isidentifier() for p in parts):
            names.add(".".join(parts))
    return sorted(names)


@dataclass
class SyncState:
    """What `tcl sync` remembers for one run: the remote's base tree and its manifest."""

    run_id: str
    root: Path
    git: bool
    job_cwd: str
    base: str  # tree_id(manifest): the tree the remote holds
    manifest: Manifest

    def save(self, path: Path) -> None:
        doc = {
            "version": VERSION,
            "run_id": self.run_id,
            "root": str(self.root),
            "git": self.git,
            "job_cwd": self.job_cwd,
            "base": self.base,
            "manifest": self.manifest.to_json(),
        }
        write_atomic(path, json.dumps(doc, separators=(",", ":")))

    @classmethod
    def load(cls, path: Path) -> SyncState:
        """Raises FileNotFoundError when there is none (no sync yet: start from the tarball)."""
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            raise
        except (OSError, ValueError) as e:
            raise SyncError(f"cannot read the sync state {path}: {e}") from None
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise SyncError(
                f"the sync state {path} is not version {VERSION}: remove it to start over"
            )
        try:
            return cls(
                run_id=str(doc["run_id"]),
                root=Path(doc["root"]),
                git=bool(doc["git"]),
                job_cwd=str(doc["job_cwd"]),
                base=str(doc["base"]),
                manifest=Manifest.from_json(doc["manifest"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise SyncError(f"the sync state {path} is damaged ({e}): remove it") from None
