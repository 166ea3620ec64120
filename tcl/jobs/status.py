"""The run's status record, `metadata.json`, and its heartbeat.

    (none) ──► running ──► completed | failed | preempted
                  ▲                       │
                  └── a relaunch (resume) ┘

`running → running` is the heartbeat. Only `StatusFile.set` writes, atomically, and it refuses
moves the table does not allow.
"""

from __future__ import annotations

import enum
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from tcl.atomic import write_json_atomic
from tcl.jobs.errors import JobsError

SCHEMA_VERSION = 1
HEARTBEAT_ENV = "TCL_HEARTBEAT_S"
DEFAULT_HEARTBEAT_S = 30.0


class RunStatus(enum.StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    PREEMPTED = "preempted"


TRANSITIONS: dict[RunStatus | None, frozenset[RunStatus]] = {
    None: frozenset({RunStatus.RUNNING}),
    RunStatus.RUNNING: frozenset(RunStatus),  # running → running is the heartbeat
    RunStatus.COMPLETED: frozenset({RunStatus.RUNNING}),  # relaunched
    RunStatus.FAILED: frozenset({RunStatus.RUNNING}),
    RunStatus.PREEMPTED: frozenset({RunStatus.RUNNING}),
}


def status_file_name(process_id: int) -> str:
    """Process 0 keeps the run's record, `metadata.json`; in a multi-node job each other process
    keeps its own (`metadata.node-N.json`: its pid, host, heartbeat and outcome), so a failure
    on any node shows without processes overwriting each other's record."""
    return "metadata.json" if process_id == 0 else f"metadata.node-{process_id}.json"


class StatusFile:
    """The one writer of a run's metadata.json."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.status: RunStatus | None = None
        self.data: dict[str, Any] = {}

    def set(self, status: RunStatus, **fields: Any) -> None:
        with self._lock:
            if status not in TRANSITIONS[self.status]:
                raise JobsError(f"status {self.status} → {status} is not allowed")
            now = time.time()
            if status is RunStatus.RUNNING and self.status is not RunStatus.RUNNING:
                self.data.update(
                    started_at=now,
                    ended_at=None,
                    exit_code=None,
                    error=None,
                    pid=os.getpid(),
                    host=socket.gethostname(),
                )
            if status is not RunStatus.RUNNING:
                self.data["ended_at"] = now
            self.data.update(fields, version=SCHEMA_VERSION, status=str(status), heartbeat_at=now)
            self.status = status
            write_json_atomic(self.path, self.data)

    def heartbeat(self) -> None:
        with self._lock:
            if self.status is not RunStatus.RUNNING:
                return
            self.data["heartbeat_at"] = time.time()
            write_json_atomic(self.path, self.data)


class Heartbeat(threading.Thread):
    """Touches metadata.json every `interval_s` while the run is `running`."""

    def __init__(self, status: StatusFile, interval_s: float | None = None) -> None:
        super().__init__(name="tcl-heartbeat", daemon=True)
        env = os.environ.get(HEARTBEAT_ENV)
        self.interval_s = interval_s or (float(env) if env else DEFAULT_HEARTBEAT_S)
        self.status = status
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.interval_s):
            self.status.heartbeat()

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout=5)
