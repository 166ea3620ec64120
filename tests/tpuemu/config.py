"""What an emulator instance knows: zones, the worker pool, SSH access, timings."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.tpuemu.workers import SshAccess, WorkerHost

DEFAULT_ZONES = ("us-central2-b", "us-central1-a", "europe-west4-a")


@dataclass(frozen=True)
class EmulatorConfig:
    """Settings of one emulator.

    ``workers``: the pool hosts nodes take their workers from (empty: every create runs out of
    capacity). ``ssh``: how to reach them; None runs no startup/shutdown scripts and kills
    nothing over SSH (netns kills still happen). ``create_delay_s``: CREATING → READY.
    ``delete_delay_s``: DELETING → gone. ``queue_poll_s``: how often a waiting queued resource
    looks for free hosts. ``require_auth``: every request needs ``Authorization: Bearer …``.
    ``queued_accepted``: a new queued resource is ACCEPTED first (the API's older behaviour)
    instead of WAITING_FOR_RESOURCES.
    """

    zones: Sequence[str] = DEFAULT_ZONES
    workers: Sequence[WorkerHost] = ()
    ssh: SshAccess | None = None
    log_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tpuemu-")))
    create_delay_s: float = 0.5
    delete_delay_s: float = 0.2
    queue_poll_s: float = 0.2
    require_auth: bool = False
    queued_accepted: bool = False
