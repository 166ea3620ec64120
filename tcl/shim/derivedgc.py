"""Keep what the host's jobs derive from their code within bounds, beside the code cache:

* ``<code-cache>/jax``: JAX's persistent compilation cache (``tcl.runner.jobenv``). JAX's own
  bound needs ``filelock`` in the job's environment, so the shim bounds it: while its files
  are over ``jax_max_bytes``, the least recently used (the later of a file's access and
  modification times) go, never one younger than ``min_age_s`` (a job may be writing it).
  A file JAX then misses is compiled again: a cache, not state.
* ``<code-cache>/envs``: the jobs' uv project environments (``tcl.runner.projectenv``). One
  unused for ``env_max_idle_s`` goes; one a job runs in is never touched: its launcher holds
  a shared ``flock`` on ``<key>.lock`` for as long as the job (and anything it started) runs,
  and the collector takes it exclusively, without waiting, before it removes the environment.

Run with the code cache's collection (``tcl.shim.codegc``), in a thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_JAX_MAX_BYTES = 10 * 1024**3
DEFAULT_ENV_MAX_IDLE_S = 14 * 24 * 3600.0
MIN_AGE_S = 600.0
READY = ".tcl-ready"  # tcl.runner.projectenv's marker, touched at each use


@dataclass
class DerivedGc:
    jax_dir: Path
    envs_dir: Path
    jax_max_bytes: int = DEFAULT_JAX_MAX_BYTES
    env_max_idle_s: float = DEFAULT_ENV_MAX_IDLE_S
    min_age_s: float = MIN_AGE_S

    def collect(self) -> list[Path]:
        return [*self._collect_jax(), *self._collect_envs()]

    def _collect_jax(self) -> list[Path]:
        files: list[tuple[float, int, Path]] = []
        for dirpath, _dirs, names in os.walk(self.jax_dir):
            for name in names:
                path = Path(dirpath) / name
                with contextlib.suppress(OSError):
                    st = path.lstat()
                    files.append((max(st.st_atime, st.st_mtime), st.st_size, path))
        total = sum(size for _, size, _ in files)
        now = time.time()
        gone: list[Path] = []
        for used, size, path in sorted(files):
            if total <= self.jax_max_bytes:
                break
            if now - used < self.min_age_s:
                continue
            try:
                path.unlink()
            except OSError as e:
                log.warning("cannot evict %s from the compilation cache: %s", path, e)
                continue
            total -= size
            gone.append(path)
        if gone:
            log.info("compilation cache: evicted %d files, %d bytes left", len(gone), total)
        return gone

    def _collect_envs(self) -> list[Path]:
        try:
            names = os.listdir(self.envs_dir)
        except FileNotFoundError:
            return []
        now = time.time()
        gone: list[Path] = []
        for name in names:
            env = self.envs_dir / name
            if name.startswith(".") or name.endswith(".lock") or not env.is_dir():
                continue
            try:
                used = (env / READY).stat().st_mtime
            except FileNotFoundError:  # a build in progress, or one a kill left half-done
                used = env.stat().st_mtime
            if now - used < max(self.env_max_idle_s, self.min_age_s):
                continue
            if self._remove_unless_in_use(env):
                gone.append(env)
        if gone:
            log.info("project environments: removed %d unused ones", len(gone))
        return gone

    def _remove_unless_in_use(self, env: Path) -> bool:
        with open(self.envs_dir / f"{env.name}.lock", "ab") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a job runs in it (or it is being built)
            doomed = self.envs_dir / f".evict-{env.name}-{secrets.token_hex(4)}"
            try:
                os.rename(env, doomed)  # a launcher arriving now finds no env, and builds one
            except OSError as e:
                log.warning("cannot remove the environment %s: %s", env, e)
                return False
        shutil.rmtree(doomed, ignore_errors=True)
        return True
