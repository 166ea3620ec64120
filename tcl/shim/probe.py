"""Asking each running task's runner where its job stands, with no client connected.

The shim must free a task's accelerators as soon as its job ends, not when the workstation next
looks (a detached run kept 8 GPUs "busy" for everyone until its owner ran ``tcl ps``). The
runner's open ``GET /api/healthcheck`` (no token: it says nothing but the state) tells it. The
runner itself stays up to serve the logs until they are fetched or the retention runs out.

A runner that stops answering (frozen with SIGSTOP, wedged) is reported once it has been silent
for ``silence_limit_s`` across probes, so the shim can end the task and free its accelerators.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Iterable
from dataclasses import dataclass

import httpx

from tcl.common.tls import shared_context

PROBE_TIMEOUT_S = 2.0
STOP_MARGIN_S = 5.0  # after the grace: the runner's SIGKILL, its last events, its answer
MAX_GRACE_S = 3600.0  # the runner's bound on /api/stop's grace_s
FINAL_STATES = {"succeeded", "failed", "terminated"}


class JobState(enum.Enum):
    RUNNING = "running"  # not ended (or not started yet)
    ENDED = "ended"
    SILENT = "silent"  # no answer for longer than the limit


@dataclass(frozen=True)
class ProbeResult:
    job: JobState
    runner_state: str = ""
    exit_code: int | None = None
    silent_s: float = 0.0
    started: bool | None = None  # whether its job ever started (None: the runner does not say)


START_GRACE_S = 120.0


class RunnerProbe:
    def __init__(self, silence_limit_s: float, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self.silence_limit_s = silence_limit_s
        self._http = httpx.AsyncClient(timeout=timeout_s, trust_env=False, verify=shared_context())
        self._silent_since: dict[str, float] = {}
        self._answered: set[str] = set()  # runners that answered once (they are up)

    async def check(self, runners: Iterable[tuple[str, int]]) -> dict[str, ProbeResult]:
        """Probe ``(task id, runner port)`` pairs concurrently."""
        pairs = list(runners)
        results = await asyncio.gather(*(self._one(t, p) for t, p in pairs))
        live = {t for t, _ in pairs}
        for gone in set(self._silent_since) - live:
            del self._silent_since[gone]
        self._answered &= live
        return dict(zip((t for t, _ in pairs), results, strict=True))

    async def _one(self, task_id: str, port: int) -> ProbeResult:
        try:
            r = await self._http.get(f"http://127.0.0.1:{port}/api/healthcheck")
            body = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            body = None
        now = time.monotonic()
        if not isinstance(body, dict) or body.get("service") != "tcl-runner":
            since = self._silent_since.setdefault(task_id, now)
            silent = now - since
            # A runner still booting (many at once on a loaded host) has never answered yet:
            # it gets START_GRACE_S before its silence counts.
            limit = self.silence_limit_s
            if task_id not in self._answered:
                limit = max(limit, START_GRACE_S)
            job = JobState.SILENT if silent >= limit else JobState.RUNNING
            return ProbeResult(job, silent_s=silent)
        self._silent_since.pop(task_id, None)
        self._answered.add(task_id)
        state = str(body.get("state", ""))
        code = body.get("exit_code")
        exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
        job = JobState.ENDED if state in FINAL_STATES else JobState.RUNNING
        started = body.get("started")
        started = started if isinstance(started, bool) else None
        return ProbeResult(job, runner_state=state, exit_code=exit_code, started=started)

    async def aclose(self) -> None:
        await self._http.aclose()


@dataclass(frozen=True)
class JobStop:
    """How :func:`stop_job` went: ``ended`` the job is over (``before``: it had ended on its
    own, nothing was stopped; ``exit_code`` then its own)."""

    ended: bool
    before: bool = False
    exit_code: int | None = None


async def stop_job(port: int, token: str, grace_s: float) -> JobStop:
    """Have the runner stop its job (SIGTERM, SIGKILL after ``grace_s``: the runner's own,
    graceful path that records the final state) and wait for it to end; a job that already
    ended is left as it is. Not ended when the runner does not answer or the job is still
    running after the grace and a margin."""
    auth = {"Authorization": f"Bearer {token}"}
    base = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + grace_s + STOP_MARGIN_S
    async with httpx.AsyncClient(
        timeout=PROBE_TIMEOUT_S, trust_env=False, headers=auth, verify=shared_context()
    ) as http:
        try:
            body = (await http.get(f"{base}/healthcheck")).json()
            if body.get("state") in FINAL_STATES:
                code = body.get("exit_code")
                own = code if isinstance(code, int) and not isinstance(code, bool) else None
                return JobStop(ended=True, before=True, exit_code=own)
            r = await http.post(f"{base}/stop", json={"grace_s": min(grace_s, MAX_GRACE_S)})
            if r.status_code != 200:
                return JobStop(ended=False)
            while time.monotonic() < deadline:
                state = (await http.get(f"{base}/healthcheck")).json().get("state")
                if state in FINAL_STATES:
                    return JobStop(ended=True)
                await asyncio.sleep(0.05)
        except (httpx.HTTPError, ValueError, AttributeError):
            return JobStop(ended=False)
    return JobStop(ended=False)
