"""Installing the job's code into the runner's working dir: an upload (checked against the
spec's sha256 and size limit, extracted safely), a tree from the host's code cache, or a
tarball already on disk (batch mode). Part of :class:`tcl.runner.service.Runner`."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

from tcl.runner import code as codemod
from tcl.runner.api import JobSpec, RunnerState
from tcl.runner.codecache import CodeCache
from tcl.runner.errors import (
    CodeHashMismatch,
    CodeNotCached,
    IllegalTransition,
    InvalidRequest,
    PayloadTooLarge,
)
from tcl.runner.runnerconfig import RunnerConfig
from tcl.runner.states import StateMachine

S = RunnerState


class CodeInstall:
    """The code steps of a runner (its other state is :class:`tcl.runner.service.Runner`'s)."""

    config: RunnerConfig
    spec: JobSpec | None
    machine: StateMachine
    cache: CodeCache | None
    _lock: threading.RLock
    _uploading: bool
    _code_sha256: str | None

    @property
    def state(self) -> RunnerState:
        return self.machine.state

    @property
    def workdir(self) -> Path:
        if self.spec is not None and self.spec.working_dir:
            return Path(self.spec.working_dir)
        return self.config.state_dir / "work"

    def _begin_code(self, sha256: str | None, content_length: int | None) -> str | None:
        """Check that code with this hash is expected now and mark an install in progress.

        Returns the normalised hash, or None when that code is already installed (a retry)."""
        sha256 = (sha256 or "").strip().lower()
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise InvalidRequest("header X-Code-Sha256 must be the body's sha256 (64 hex digits)")
        with self._lock:
            spec = self.spec
            if (
                spec is not None
                and self.state is not S.WAITING_CODE
                and sha256 == self._code_sha256
            ):
                return None  # the same code again (a retry after a lost answer)
            if spec is None or self.state is not S.WAITING_CODE or self._uploading:
                busy = " (an upload is in progress)" if self._uploading else ""
                raise IllegalTransition(f"code is not expected in state {self.state}{busy}")
            if spec.code is not None and spec.code.sha256 != sha256:
                raise CodeHashMismatch(
                    f"X-Code-Sha256 {sha256} is not the spec's code.sha256 {spec.code.sha256}"
                )
            limit = self.config.max_code_bytes
            if content_length is not None and content_length > limit:
                raise PayloadTooLarge(
                    f"code upload of {content_length} bytes is over the limit of {limit} bytes"
                )
            self._uploading = True
            return sha256

    def _end_code(self) -> None:
        with self._lock:
            self._uploading = False

    async def use_cached_code(self, sha256: str) -> RunnerState:
        """Install code from the host's tree cache without an upload; CodeNotCached if absent."""
        checked = self._begin_code(sha256, None)
        if checked is None:
            return self.state
        try:
            if self.cache is None or self.cache.tree(checked) is None:
                where = "in this host's code cache" if self.cache else "here (no code cache)"
                raise CodeNotCached(f"code {checked} is not {where}; upload it (PUT /api/code)")
            await asyncio.to_thread(self._install_cached, checked)
        finally:
            self._end_code()
        return self.state

    def _install_cached(self, sha256: str) -> None:
        assert self.cache is not None
        premounted = self.config.premounted_code == sha256 and (
            self.spec is None or self.spec.working_dir is None
        )
        if not premounted:
            self.cache.materialise(sha256, self.workdir)
        self._code_ready(sha256)

    async def upload_code(
        self, chunks: AsyncIterator[bytes], sha256: str | None, content_length: int | None
    ) -> RunnerState:
        """Receive, verify and extract the tarball; state goes to ready."""
        checked = self._begin_code(sha256, content_length)
        if checked is None:
            return self.state
        sha256, limit = checked, self.config.max_code_bytes
        archive = self.config.state_dir / "code.tar.gz"
        try:
            await codemod.receive(chunks, archive, sha256, limit)
            await asyncio.to_thread(self._extract, archive, sha256)
        finally:
            archive.unlink(missing_ok=True)
            self._end_code()
        return self.state

    def use_code_file(self, archive: Path) -> None:
        """Batch mode: the tarball is already on disk (checked against the spec's hash)."""
        with self._lock:
            spec = self.spec
            if spec is None or self.state is not S.WAITING_CODE:
                raise IllegalTransition(f"code is not expected in state {self.state}")
            actual = codemod.sha256_file(archive)
            if spec.code is not None and actual != spec.code.sha256:
                raise CodeHashMismatch(
                    f"sha256 of {archive} is {actual}, the spec says {spec.code.sha256}"
                )
            self._extract(archive, actual)

    def _extract(self, archive: Path, sha256: str) -> None:
        if self.cache is not None:
            self.cache.add(sha256, archive, self.config.max_unpacked_bytes, self.config.max_members)
            self.cache.materialise(sha256, self.workdir)
        else:
            codemod.extract(
                archive, self.workdir, self.config.max_unpacked_bytes, self.config.max_members
            )
        self._code_ready(sha256)

    def _code_ready(self, sha256: str) -> None:
        with self._lock:
            self._code_sha256 = sha256
            self.machine.move(S.READY, expect=frozenset({S.WAITING_CODE}))
