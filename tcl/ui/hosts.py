"""``/api/hosts``: what each configured host offers now (what `tcl hosts --check` asks), each
host given at most the UI's timeout, so one dead host shows an error instead of a hang."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from tcl.control.hostlisting import host_record
from tcl.control.service import HostStatus
from tcl.ui.api import AcceleratorItem, HostItem, HostList
from tcl.ui.context import Ui, ui_of

router = APIRouter(prefix="/api/hosts", tags=["hosts"])
UiDep = Annotated[Ui, Depends(ui_of)]


def host_item(s: HostStatus) -> HostItem:
    """The page's item: `tcl hosts`'s record of the host (one reading of a shim's report),
    with its free and busy counts."""
    r = host_record(s)
    accs = [
        AcceleratorItem(index=a.index, chip=a.chip, free=a.free, task_id=a.task_id)
        for a in r.accelerators
    ]
    free = sum(1 for a in accs if a.free)
    return HostItem(
        name=r.name,
        type=r.type,
        address=r.address,
        reachable=r.reachable,
        detail=r.detail,
        free=free,
        busy=len(accs) - free,
        accelerators=accs,
    )


@router.get("")
async def list_hosts(ui: UiDep) -> HostList:
    async with ui.control() as ctl:
        statuses = await ctl.host_statuses(True, timeout_s=ui.settings.hosts_timeout_s)
    return HostList(hosts=[host_item(s) for s in statuses])
