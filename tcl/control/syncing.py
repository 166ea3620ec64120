"""``tcl sync``: push the working tree's change since a session's base to its runner.

The base is the tree the session was shipped (read back from the code tarball in the local
cache, so it is exact), kept per run in ``<state>/sync/<run>.json`` with a stat cache; each
acknowledged patch becomes the new base. The diff and the patch are
:mod:`tcl.control.treesync`'s; the runner applies it all or nothing
(:mod:`tcl.runner.treepatch`). A patch is content-addressed: one resent after a dropped
connection is recognised by the runner and not applied twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tcl.control import interactive, treesync
from tcl.control.errors import AgentUnreachableError, SshError, SyncConflictError, TclError
from tcl.control.paths import cache_dir, state_dir
from tcl.control.shipping import cached_snapshot, find_root

if TYPE_CHECKING:
    from tcl.control.service import Control

WATCH_INTERVAL_S = 0.5


@dataclass(frozen=True)
class Synced:
    paths: int  # paths changed by the patch (0: the tree had not changed)
    modules: list[str]  # Python modules among them, for autoreload
    elapsed_s: float
    already: bool = False  # the runner had applied this patch before (a retry)


def state_path(run_id: str) -> Path:
    d = state_dir() / "sync"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    return d / f"{run_id}.json"


def begin(ctl: Control, run_id: str, start: Path) -> treesync.SyncState:
    """Record the session's base: the shipped tree, and where it came from."""
    run = ctl.store.get_run(run_id)
    if not run.code_sha256:
        raise TclError(f"run {run_id} shipped no code: nothing to sync")
    root, git = find_root(start.resolve())
    tarball = cached_snapshot(cache_dir(), run.code_sha256).tarball
    manifest = treesync.manifest_of_tarball(tarball)
    state = treesync.SyncState(
        run_id=run_id,
        root=root,
        git=git,
        job_cwd=run.request.job_cwd,
        base=treesync.tree_id(manifest),
        manifest=manifest,
    )
    state.save(state_path(run_id))
    return state


def latest_session(ctl: Control, start: Path) -> str:
    """The newest live session shipped from the repo around ``start`` (``tcl sync``'s
    default run)."""
    root, _ = find_root(start.resolve())
    for run in ctl.store.list_runs(include_final=False):  # newest first
        path = state_path(run.id)
        if path.exists() and treesync.SyncState.load(path).root == root:
            return run.id
    raise TclError(f"no live session was started from {root}: tcl sync RUN")


async def sync_once(ctl: Control, run_id: str, tgt: interactive.Target | None = None) -> Synced:
    """Diff, send, and on acknowledgement make the new tree the base. ``tgt``: the run's
    target, kept between calls (``watch``) so its runner client is reused."""
    started = time.perf_counter()
    # Off the loop: `tcl repl --sync` forwards the notebook's traffic on it, and the state
    # (a manifest of every file) is read, hashed and written here.
    path = state_path(run_id)
    if path.exists():
        state = await asyncio.to_thread(treesync.SyncState.load, path)
    else:  # a session started elsewhere: this tree's base (reads the store: on the loop)
        state = begin(ctl, run_id, Path.cwd())
    root = state.root
    now = await asyncio.to_thread(treesync.scan, root, state.git, state.manifest)
    patch = await asyncio.to_thread(treesync.make_patch, root, state.manifest, now)
    if patch is None:
        return Synced(0, [], time.perf_counter() - started)
    own = tgt is None
    tgt = tgt or interactive.target(ctl, run_id)
    if tgt is None:
        raise TclError(f"run {run_id} has not been placed yet")
    try:
        for attempt in (0, 1):
            try:
                ack = await (await tgt.api()).sync(patch)
                break
            except (AgentUnreachableError, SshError):
                if attempt:
                    raise
                await tgt.reset()  # a dropped tunnel: the same patch again, through a new one
    finally:
        if own:
            await tgt.aclose()
    state.manifest = now
    state.base = ack.base
    await asyncio.to_thread(state.save, state_path(run_id))
    modules = treesync.changed_modules(patch, state.job_cwd)
    return Synced(
        ack.applied or len(patch.files), modules, time.perf_counter() - started, ack.already
    )


def describe(s: Synced) -> str:
    if not s.paths:
        return "up to date"
    text = f"synced {s.paths} path(s) in {s.elapsed_s * 1000:.0f} ms"
    if s.modules:
        more = len(s.modules) - 10
        shown = ", ".join(s.modules[:10]) + (f" and {more} more" if more > 0 else "")
        text += f"; changed modules: {shown} (in the notebook: %load_ext autoreload; %autoreload 2)"
    return text


async def watch(ctl: Control, run_id: str, say: Callable[[str], None]) -> None:
    """Sync on every change until cancelled; a conflict is reported once and waited out (the
    user resolves it; the base stays)."""
    reported = ""
    tgt = interactive.target(ctl, run_id)
    try:
        while True:
            try:
                s = await sync_once(ctl, run_id, tgt)
                if s.paths:
                    say(describe(s))
                reported = ""
            except SyncConflictError as e:
                if str(e) != reported:
                    say(f"sync refused: {e}")
                    reported = str(e)
            except (AgentUnreachableError, SshError) as e:
                say(f"sync: {e}; retrying")
            await asyncio.sleep(WATCH_INTERVAL_S)
    finally:
        if tgt is not None:
            await tgt.aclose()
