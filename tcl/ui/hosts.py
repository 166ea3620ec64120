"""``/api/hosts``: what each configured host offers now (what `tcl hosts --check` asks), each
host given at most the UI's timeout, so one dead host shows an error instead of a hang."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from tcl.control.service import HostStatus
from tcl.ui.api import AcceleratorItem, HostItem, HostList
from tcl.ui.context import Ui, ui_of

router = APIRouter(prefix="/api/hosts", tags=["hosts"])
UiDep = Annotated[Ui, Depends(ui_of)]


def host_item(s: HostStatus) -> HostItem:
    accs = []
    if s.info is not None:
        accs = [
            AcceleratorItem(
                index=a.index,
                chip=a.chip,
                free=a.task_id is None and not a.busy_outside,
                task_id=a.task_id,
            )
            for a in s.info.accelerators
        ]
    free = sum(1 for a in accs if a.free)
    return HostItem(
        name=s.name,
        type=s.type,
        address=s.address,
        reachable=s.reachable,
        detail=s.detail,
        free=free,
        busy=len(accs) - free,
        accelerators=accs,
    )


@router.get("")
async def list_hosts(ui: UiDep) -> HostList:
    async with ui.control() as ctl:
        statuses = await ctl.host_statuses(True, timeout_s=ui.settings.hosts_timeout_s)
    return HostList(hosts=[host_item(s) for s in statuses])
