"""The task store: in-memory records, each persisted as ``<state-dir>/tasks/<id>/task.json``.

``update`` is the only writer of a task's status. It consults the transition table, keeps the
first termination reason (terminate is repeatable), persists atomically before returning and
hands out copies, so no caller can change a record behind the store's back.

Every method may block on the disk (fsync, rename): the service calls them in a thread. Removal
is split so that the slow part can be: ``remove`` renames the task dir to a trash name (one
rename, fast) and ``discard`` deletes that tree (seconds for a big one).
"""

from __future__ import annotations

import json
import logging
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from tcl.atomic import write_atomic
from tcl.shim.api import Ports, TaskInfo, TaskSpec, TaskStatus, TerminationReason, valid_task_id
from tcl.shim.errors import BadRequest, IllegalTransition, NotFound, ShimError, TaskExists
from tcl.shim.states import allowed

log = logging.getLogger(__name__)

RECORD_VERSION = 1
TASK_FILE = "task.json"
# Removed task dirs wait under this prefix for deletion. A leading dot is never a valid task
# id, so a trash dir cannot collide with a task and, if a crash leaves one, load() reports it
# as stray and the reconcile loop deletes it at start.
TRASH_PREFIX = ".trash-"


class Handle(BaseModel):
    """What an executor needs to find its workload again after a shim restart."""

    container_id: str | None = None
    pid: int | None = None
    pid_start_time: float | None = None  # guards against pid reuse


class TaskRecord(BaseModel):
    """Persisted per task (versioned JSON). The spec is stored without registry credentials."""

    version: Literal[1] = 1
    spec: TaskSpec
    info: TaskInfo
    handle: Handle = Field(default_factory=Handle)
    finished_at: float | None = None  # when it became terminated (retention counts from here)
    # The job ended on its own and its runner lingers to serve the logs: its workload may stay
    # alive after termination (until the retention or a removal) without being stopped.
    job_ended: bool = False
    workload_removed: bool = False  # expired: runner, container and files gone, record kept


class TaskStore:
    def __init__(self, state_dir: Path) -> None:
        self.tasks_dir = state_dir / "tasks"
        self.tasks_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._records: dict[str, TaskRecord] = {}
        self._lock = threading.Lock()

    def task_dir(self, task_id: str) -> Path:
        # Ids are validated at the API; this is the last line before a path is built from one
        # ("..", "a/b" or "" would point outside the task's own folder).
        if not valid_task_id(task_id):
            raise BadRequest(f"invalid task id {task_id[:64]!r}")
        return self.tasks_dir / task_id

    # -- reads: copies only -------------------------------------------------------------------
    def get(self, task_id: str) -> TaskRecord:
        with self._lock:
            rec = self._records.get(task_id)
            if rec is None:
                raise NotFound(f"no task {task_id!r}")
            return rec.model_copy(deep=True)

    def records(self) -> list[TaskRecord]:
        with self._lock:
            return [r.model_copy(deep=True) for r in self._records.values()]

    def __contains__(self, task_id: object) -> bool:
        with self._lock:
            return task_id in self._records

    # -- writes -------------------------------------------------------------------------------
    def add(self, record: TaskRecord) -> TaskRecord:
        # secrets are used once, at launch, and never written down
        fs = record.spec.cluster_fs
        spec = record.spec.model_copy(
            update={
                "registry_auth": None,
                "cluster_fs": fs.model_copy(update={"meta_password": None}) if fs else None,
            }
        )
        record = record.model_copy(update={"spec": spec}, deep=True)
        with self._lock:
            if record.info.id in self._records:
                raise TaskExists(f"task {record.info.id!r} already exists")
            self.task_dir(record.info.id).mkdir(mode=0o700, exist_ok=True)
            self._persist(record)
            self._records[record.info.id] = record
            return record.model_copy(deep=True)

    def update(
        self,
        task_id: str,
        *,
        status: TaskStatus | None = None,
        reason: TerminationReason | None = None,
        handle: Handle | None = None,
        job_ended: bool | None = None,
        workload_removed: bool | None = None,
        on_commit: Callable[[], object] | None = None,
        **info_changes: Any,
    ) -> TaskRecord:
        """Move a task (guarded by the transition table) and/or record facts about it.

        ``on_commit`` runs under the store's lock once the change is durable and in place, so
        no reader sees the change before its consequence (a terminated task's chips freed)."""
        with self._lock:
            rec = self._records.get(task_id)
            if rec is None:
                raise NotFound(f"no task {task_id!r}")
            info = rec.info
            changes: dict[str, Any] = dict(info_changes)
            record_changes: dict[str, Any] = {"handle": handle or rec.handle}
            if job_ended is not None:
                record_changes["job_ended"] = job_ended
            if workload_removed is not None:
                record_changes["workload_removed"] = workload_removed
            if status is not None:
                if not allowed(info.status, status):
                    raise IllegalTransition(f"task {task_id!r}: {info.status} -> {status} refused")
                changes["status"] = status
                if status is TaskStatus.TERMINATED:
                    if info.status is TaskStatus.TERMINATED:
                        # Repeated terminate: the first reason, message and exit code stand.
                        for key in ("termination_reason", "message", "exit_code"):
                            changes.pop(key, None)
                        if info.exit_code is None and info_changes.get("exit_code") is not None:
                            changes["exit_code"] = info_changes["exit_code"]
                    else:
                        changes["termination_reason"] = reason or TerminationReason.DONE
                        record_changes["finished_at"] = time.time()
            elif info.status is TaskStatus.TERMINATED:
                # Facts arriving after termination must not rewrite the outcome.
                for key in ("termination_reason", "message"):
                    changes.pop(key, None)
            changes["updated_at"] = time.time()
            new_info = info.model_copy(update=changes)
            TaskInfo.model_validate(new_info.model_dump())  # refuse ill-typed changes early
            new = rec.model_copy(update={"info": new_info, **record_changes})
            self._persist(new)
            self._records[task_id] = new
            if on_commit is not None:
                on_commit()
            return new.model_copy(deep=True)

    def prune(self, task_id: str) -> None:
        """Delete everything in the task's dir but its task.json (blocking: call in a thread)."""
        for entry in list(self.task_dir(task_id).iterdir()):
            if entry.name == TASK_FILE:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)

    def remove(self, task_id: str) -> Path | None:
        """Forget the task and move its dir aside; return that trash dir for ``discard``.

        The record goes only once its dir is out of the way, so a new task with the same id
        starts in an empty dir."""
        with self._lock:
            if task_id not in self._records:
                raise NotFound(f"no task {task_id!r}")
            src = self.task_dir(task_id)
            trash = self.tasks_dir / f"{TRASH_PREFIX}{task_id}.{secrets.token_hex(4)}"
            try:
                src.rename(trash)
            except FileNotFoundError:
                del self._records[task_id]
                return None  # nothing on disk to delete
            except OSError as e:  # the task stays: nothing has changed
                raise ShimError(f"task {task_id!r}: cannot move its dir aside: {e}") from e
            del self._records[task_id]
            return trash

    @staticmethod
    def discard(trash: Path) -> None:
        """Delete a dir that ``remove`` moved aside. Slow for a big tree: call it in a thread."""
        shutil.rmtree(trash, ignore_errors=True)

    # -- disk ---------------------------------------------------------------------------------
    def _persist(self, record: TaskRecord) -> None:
        path = self.task_dir(record.info.id) / TASK_FILE
        write_atomic(path, record.model_dump_json(indent=1).encode())

    def load(self) -> list[Path]:
        """Read every task.json; return the task dirs that belong to no readable task."""
        stray: list[Path] = []
        with self._lock:
            for d in sorted(self.tasks_dir.iterdir()):
                if not d.is_dir():
                    continue
                if d.name.startswith(TRASH_PREFIX):  # a removal cut short by a crash
                    stray.append(d)
                    continue
                path = d / TASK_FILE
                try:
                    raw = json.loads(path.read_text())
                    if raw.get("version") != RECORD_VERSION:
                        raise ValueError(f"unknown task.json version {raw.get('version')!r}")
                    rec = TaskRecord.model_validate(raw)
                    if rec.info.id != d.name:
                        raise ValueError(f"task.json names {rec.info.id!r}")
                except (OSError, ValueError, ValidationError) as e:
                    log.warning("task dir %s has no usable task.json (%s)", d, e)
                    stray.append(d)
                    continue
                self._records[rec.info.id] = rec
        return stray


def new_record(spec: TaskSpec, info_fields: dict[str, Any]) -> TaskRecord:
    now = time.time()
    info = TaskInfo(
        id=spec.id,
        name=spec.name,
        status=TaskStatus.PENDING,
        image=spec.image,
        created_at=now,
        updated_at=now,
        ports=Ports(),
        **info_fields,
    )
    return TaskRecord(spec=spec, info=info)
