"""What ``tcl hosts`` shows: one typed record per configured host (its stable ``--json`` form,
docs/cli.md), built where the connections are (the ``tcl serve`` daemon, whose SSH connections
to the hosts are warm, or the CLI itself when no daemon answers) and sent to the CLI over the
daemon's socket. The CLI only prints them."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from tcl.control.listingwire import Strict

if TYPE_CHECKING:
    from tcl.control.lifecycle.idlehosts import IdleNode
    from tcl.control.service import Control, HostStatus


class HostsRequest(Strict):
    """``tcl hosts``'s flags."""

    config_path: str
    config_named: bool
    check: bool = False  # contact each host's agent


class AcceleratorRecord(Strict):
    index: int
    chip: str
    free: bool
    task_id: str | None
    fake: bool


class IdleRecord(Strict):
    """A node deleted after ``timeout_s`` without a run (a host's ``idle_timeout_s``)."""

    timeout_s: float
    left_s: float | None  # until it is deleted, when the listing was made (None: busy)


class HostRecord(Strict):
    name: str
    type: str
    address: str
    reachable: bool | None  # None: not checked
    detail: str  # what it offers, or why it cannot be used
    accelerators: list[AcceleratorRecord]
    idle: IdleRecord | None = None

    def json_form(self) -> dict[str, object]:
        """The stable JSON form (docs/cli.md): ``idle_delete_in_s`` only for a node with an
        idle timeout, null while busy."""
        out = self.model_dump(mode="json", exclude={"idle"})
        if self.idle is not None:
            left = self.idle.left_s
            out["idle_delete_in_s"] = round(left, 1) if left is not None else None
        return out

    def idle_text(self) -> str:
        if self.idle is None:
            return ""
        if self.idle.left_s is None:
            return f" · busy (node deleted {self.idle.timeout_s:g} s after its last run)"
        return f" · idle: node deleted in {self.idle.left_s:.0f} s"


class HostListing(Strict):
    hosts: list[HostRecord]


async def list_hosts(ctl: Control, check: bool) -> HostListing:
    """Every config host in solver order; with ``check``, what each offers now and, for a node
    with an idle timeout, how long until it is deleted."""
    statuses = await ctl.host_statuses(check)
    idle: dict[str, IdleNode] = {}
    if check:
        from tcl.control.lifecycle.idlehosts import idle_nodes, recent_runs

        idle = await idle_nodes(ctl, *await recent_runs(ctl.store, 500))
    now = time.time()
    return HostListing(hosts=[host_record(s, idle.get(s.name), now) for s in statuses])


def host_record(s: HostStatus, idle: IdleNode | None = None, now: float = 0.0) -> HostRecord:
    """A host's record from its status (``idle``: its node's idle countdown at ``now``)."""
    accs = []
    if s.info is not None:
        accs = [
            AcceleratorRecord(
                index=a.index,
                chip=a.chip,
                free=a.task_id is None and not a.busy_outside,
                task_id=a.task_id,
                fake=a.fake,
            )
            for a in s.info.accelerators
        ]
    return HostRecord(
        name=s.name,
        type=s.type,
        address=s.address,
        reachable=s.reachable,
        detail=s.detail,
        accelerators=accs,
        idle=IdleRecord(timeout_s=idle.timeout_s, left_s=idle.left_s(now)) if idle else None,
    )
