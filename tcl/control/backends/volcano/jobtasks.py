"""A namespace's tcl Volcano jobs as the orphan sweep sees them (:mod:`tcl.control.lifecycle.
orphans`): each vcjob labelled with its run and attempt (``manifest.vcjob``) is a task."""

from __future__ import annotations

import datetime
from typing import Any

from tcl.control.backends.base import HostTask
from tcl.control.backends.volcano.manifest import LABEL_ATTEMPT, LABEL_RUN_ID

# the jobs tcl made: those carrying both labels (`key` alone: the label exists)
SELECTOR = f"{LABEL_RUN_ID},{LABEL_ATTEMPT}"


def host_task(host: str, job: dict[str, Any], now: float) -> HostTask | None:
    """The task a listed vcjob is, None when its labels are not tcl's own."""
    meta = job.get("metadata") or {}
    labels = meta.get("labels") or {}
    run_id, attempt = labels.get(LABEL_RUN_ID), labels.get(LABEL_ATTEMPT)
    name = meta.get("name")
    if not run_id or not isinstance(attempt, str) or not attempt.isdigit() or not name:
        return None
    return HostTask(host, name, run_id, int(attempt), now - _created(meta, now))


def _created(meta: dict[str, Any], now: float) -> float:
    """Its creationTimestamp (RFC 3339, UTC); ``now`` when it has none that parses (young:
    the sweep leaves it alone this time)."""
    stamp = meta.get("creationTimestamp")
    try:
        return datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return now
