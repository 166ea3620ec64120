"""The code on the host's PVC: a short-lived helper pod mounts it and receives the tarball
through the API server's exec stream, into a content-addressed file (skipped when present).

Every pod of a run then reads ``<pvc_mount_path>/tcl/code/<sha256>.tar.gz`` from the PVC and its
runner extracts it into its own work dir: one upload per code version, however many pods.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from typing import Any

from tcl.control.backends.base import Observer
from tcl.control.backends.volcano.kube import KubeClient
from tcl.control.errors import AgentError
from tcl.control.shipping import Snapshot

HELPER_START_TIMEOUT_S = 180.0
POLL_S = 0.5
# "$1" is the path; written under a temporary name and renamed: a reader never sees half a file
_PRESENT = 'test -s "$1"'
_RECEIVE = 'mkdir -p "$(dirname "$1")" && cat > "$1.part.$$" && mv -f "$1.part.$$" "$1"'


async def ship_code(
    kube: KubeClient,
    helper_pod: Callable[[str], dict[str, Any]],
    path: str,
    snap: Snapshot,
    obs: Observer,
) -> int:
    """Put the snapshot at ``path`` on the PVC unless it is there (a helper pod made by
    ``helper_pod(name)`` receives it); return the bytes uploaded."""
    name = f"tcl-code-{snap.sha256[:12]}-{secrets.token_hex(3)}"
    obs.status("starting a helper pod to put the code on the PVC")
    await asyncio.to_thread(kube.create_pod, helper_pod(name))
    try:
        await _wait_running(kube, name)
        present = await asyncio.to_thread(kube.exec, name, ["sh", "-c", _PRESENT, "sh", path])
        if present.exit_code == 0:
            return 0
        obs.status(f"uploading the code to the PVC ({snap.files} files)")
        got = await asyncio.to_thread(
            kube.exec, name, ["sh", "-c", _RECEIVE, "sh", path], snap.tarball, obs.progress
        )
        if got.exit_code != 0:
            why = (got.stderr or got.stdout).decode(errors="replace").strip()[-300:]
            raise AgentError(f"uploading the code to the PVC failed ({got.exit_code}): {why}")
        return snap.size
    finally:
        await asyncio.to_thread(kube.delete_pod, name)


async def _wait_running(kube: KubeClient, name: str) -> None:
    deadline = time.monotonic() + HELPER_START_TIMEOUT_S
    why = "not scheduled yet"
    while time.monotonic() < deadline:
        pod = await asyncio.to_thread(kube.get_pod, name)
        phase = pod.status.phase if pod is not None and pod.status else None
        if phase == "Running":
            return
        if phase in ("Succeeded", "Failed"):
            raise AgentError(f"the code helper pod {name} ended ({phase}) before it was used")
        why = pending_reason(pod) or why
        await asyncio.sleep(POLL_S)
    raise AgentError(
        f"the code helper pod {name} did not start within {HELPER_START_TIMEOUT_S:.0f} s: {why}"
    )


def pending_reason(pod: Any) -> str:
    """Why a pod waits, as the scheduler or the kubelet put it (``PodScheduled`` false, a
    container waiting), or ""."""
    status = getattr(pod, "status", None)
    if status is None:
        return ""
    for c in status.conditions or []:
        if c.type == "PodScheduled" and c.status == "False":
            return f"{c.reason or 'Unschedulable'}: {c.message or ''}".strip(": ")
    for cs in status.container_statuses or []:
        waiting = cs.state.waiting if cs.state else None
        if waiting is not None and waiting.reason:
            return f"{waiting.reason}: {waiting.message or ''}".strip(": ")
    return ""
