"""Checkpoints on disk, without JAX: names, completeness, `latest`, listing, replacing a
checkpoint atomically, and resolving a `--restore` path.

    OUT/checkpoints/<project>/<group>/<name>[/<run_id>]/<suffix>/
        checkpoint/ rng.npy config.json job.json config.yaml (written last: marks it complete)
    OUT/checkpoints/<project>/<group>/<name>[/<run_id>]/latest   one line: a suffix

The run-id folder is there when the launcher runs the job (one run id, one set of checkpoints,
so a relaunched run resumes its own); `resolve_restore` lets a seed-style path that leaves it
out (project/group/name/suffix) find it.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import errno
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from tcl.atomic import fsync_dir, write_atomic
from tcl.jobs.errors import CheckpointError

TREE_DIR = "checkpoint"
RNG_FILE = "rng.npy"
METADATA_FILE = "config.json"
JOB_FILE = "job.json"
CONFIG_FILE = "config.yaml"  # written last: its presence marks a complete checkpoint
LATEST_FILE = "latest"
RUN_ID_DEPTH = 3  # project/group/name/<run_id>: the launcher's extra folder sits at index 3


def is_complete(directory: Path) -> bool:
    return (directory / CONFIG_FILE).is_file() and (directory / TREE_DIR).is_dir()


def partial_dir(directory: Path) -> Path:
    """Where a checkpoint is assembled; the same path on every process (multi-host saves)."""
    return directory.parent / f".{directory.name}.partial"


def aside_dir(directory: Path) -> Path:
    """Where the checkpoint being replaced waits when no atomic exchange is available."""
    return directory.parent / f".{directory.name}.old"


def load_metadata(directory: Path) -> dict[str, Any]:
    """config.json of a complete checkpoint."""
    recover(directory)
    if not is_complete(directory):
        raise CheckpointError(f"no complete checkpoint at {directory}")
    data = json.loads((directory / METADATA_FILE).read_text())
    if not isinstance(data, dict):
        raise CheckpointError(f"{directory / METADATA_FILE} is not a JSON object")
    return data


def clear_partial(directory: Path) -> None:
    """Remove what a crashed save left behind (main process, before a save)."""
    shutil.rmtree(partial_dir(directory), ignore_errors=True)


# -- replacing a checkpoint --------------------------------------------------------------------


def replace_dir(new: Path, target: Path) -> None:
    """Put the complete checkpoint `new` at `target`, replacing the one there, if any, so that
    `target` is never missing nor incomplete, even if `target` is the one `latest` names:
    swapped in one step (Linux renameat2 RENAME_EXCHANGE), then the old one removed. Where the
    file system cannot exchange, the old one is moved aside first, and `recover` puts it back
    after a crash in between."""
    if not target.exists():
        new.rename(target)
        fsync_dir(target.parent)
        return
    if _exchange(new, target):  # `new` now holds the old checkpoint
        fsync_dir(target.parent)
        shutil.rmtree(new, ignore_errors=True)
        return
    _swap_by_moving_aside(new, target)


def _swap_by_moving_aside(new: Path, target: Path) -> None:
    aside = aside_dir(target)
    shutil.rmtree(aside, ignore_errors=True)
    target.rename(aside)
    new.rename(target)
    fsync_dir(target.parent)
    shutil.rmtree(aside, ignore_errors=True)


def recover(target: Path) -> None:
    """After a crash between the two renames of the fallback swap, the old checkpoint waits
    complete beside its place: put it back (a race between processes is harmless)."""
    aside = aside_dir(target)
    if not is_complete(target) and is_complete(aside) and not target.exists():
        with contextlib.suppress(OSError):
            aside.rename(target)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_libc: Any = None


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two directories; False where the OS or file system cannot."""
    global _libc
    if not sys.platform.startswith("linux"):
        return False
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    fn = getattr(_libc, "renameat2", None)
    if fn is None:
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
        return False
    raise OSError(err, f"cannot swap {a} and {b}: {os.strerror(err)}")


# -- latest and listing ------------------------------------------------------------------------


def register(scope_dir: Path, suffix: str) -> None:
    if not is_complete(scope_dir / suffix):
        raise CheckpointError(f"cannot register {suffix!r}: no complete checkpoint there")
    write_atomic(scope_dir / LATEST_FILE, suffix + "\n")


def latest(scope_dir: Path) -> str | None:
    path = scope_dir / LATEST_FILE
    if not path.is_file():
        return None
    suffix = path.read_text().strip()
    if not suffix:
        return None
    recover(scope_dir / suffix)
    return suffix if is_complete(scope_dir / suffix) else None


def list_checkpoints(scope_dir: Path) -> list[str]:
    """Suffixes (relative to `scope_dir`) of every complete checkpoint below it."""
    if not scope_dir.is_dir():
        return []
    found = [p.parent for p in scope_dir.rglob(CONFIG_FILE)]
    rels = [d.relative_to(scope_dir).as_posix() for d in found if is_complete(d)]
    return sorted(r for r in rels if not any(part.startswith(".") for part in r.split("/")))


@dataclasses.dataclass(frozen=True)
class CheckpointInfo:
    """One complete checkpoint, as `tcl checkpoints` lists it."""

    restore: str  # the path to give --restore (relative to OUT/checkpoints)
    step: int | None  # config.json's "steps" (trainers) or "step" (seed 001's custom job)
    job: str | None  # the job key that saved it (job.json)
    latest: bool  # its run's `latest` names it
    saved_at: float  # mtime of config.yaml


def catalog(checkpoints_dir: Path) -> list[CheckpointInfo]:
    """Every complete checkpoint under `checkpoints_dir`, sorted by path."""
    out = []
    for rel in list_checkpoints(checkpoints_dir):
        directory = checkpoints_dir / rel
        meta = _read_json(directory / METADATA_FILE)
        job = _read_json(directory / JOB_FILE)
        step = meta.get("steps", meta.get("step"))
        out.append(
            CheckpointInfo(
                restore=rel,
                step=step if isinstance(step, int) else None,
                job=str(job["job"]) if job.get("job") else None,
                latest=_is_latest(checkpoints_dir, rel),
                saved_at=(directory / CONFIG_FILE).stat().st_mtime,
            )
        )
    return out


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _is_latest(checkpoints_dir: Path, rel: str) -> bool:
    parts = rel.split("/")
    for i in range(1, len(parts)):
        path = checkpoints_dir.joinpath(*parts[:i]) / LATEST_FILE
        if path.is_file() and path.read_text().strip() == "/".join(parts[i:]):
            return True
    return False


# -- --restore paths ---------------------------------------------------------------------------


def resolve_restore(checkpoints_dir: Path, rel: str | Path) -> str:
    """The complete checkpoint `rel` (relative to `checkpoints_dir`) means:

    - a complete checkpoint: itself;
    - a run's folder (one with `latest`): its latest checkpoint;
    - project/group/name/suffix (seed 001's form) where the launcher added a run-id folder:
      the one run holding that suffix;
    - project/group/name: the latest checkpoint of its only run.

    Anything else, or a choice between several runs, is a CheckpointError listing what is there.
    """
    rel_posix = Path(rel).as_posix().strip("/")
    directory = checkpoints_dir / rel_posix
    recover(directory)
    if is_complete(directory):
        return rel_posix
    newest = latest(directory)
    if newest is not None:
        return f"{rel_posix}/{newest}"
    candidates = _with_run_folder(checkpoints_dir, rel_posix)
    if len(candidates) == 1:
        return candidates[0]
    if candidates:
        raise CheckpointError(
            f"several runs hold {rel_posix}: {', '.join(candidates)}; give one of them"
        )
    raise CheckpointError(f"no checkpoint at {rel_posix}{_nearby(checkpoints_dir, rel_posix)}")


def _with_run_folder(checkpoints_dir: Path, rel: str) -> list[str]:
    parts = rel.split("/")
    if len(parts) < RUN_ID_DEPTH:
        return []
    name_dir = checkpoints_dir.joinpath(*parts[:RUN_ID_DEPTH])
    if not name_dir.is_dir():
        return []
    rest = parts[RUN_ID_DEPTH:]
    found = []
    for run in sorted(p for p in name_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if rest:
            if is_complete(run.joinpath(*rest)):
                found.append("/".join([*parts[:RUN_ID_DEPTH], run.name, *rest]))
        else:
            newest = latest(run)
            if newest is not None:
                found.append("/".join([*parts, run.name, newest]))
    return found


def _nearby(checkpoints_dir: Path, rel: str, limit: int = 8) -> str:
    parts = rel.split("/")
    for i in range(len(parts), -1, -1):
        base = checkpoints_dir.joinpath(*parts[:i])
        if base.is_dir():
            found = [f"{'/'.join(parts[:i])}/{s}".lstrip("/") for s in list_checkpoints(base)]
            if found:
                more = f" (and {len(found) - limit} more)" if len(found) > limit else ""
                return (
                    f"; checkpoints there: {', '.join(found[:limit])}{more} "
                    "(all of them: tcl checkpoints)"
                )
            break
    return f" (none under {checkpoints_dir}; list them with: tcl checkpoints)"
