"""Following a run from the CLI (shared by ``submit`` and ``logs -f``): Ctrl-C detaches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tcl.cli._common import err
from tcl.cli.render import print_event
from tcl.control.follow import follow
from tcl.control.service import Control
from tcl.control.states import RunState

if TYPE_CHECKING:
    from tcl.control.store import Run


def exit_code_of(run: Run) -> int:
    if run.state is RunState.SUCCEEDED:
        return 0
    if run.exit_code:
        return run.exit_code
    return 1


async def follow_with(ctl: Control, run_ref: str, timestamps: bool, after: int = 0) -> Run:
    """Follow on an open :class:`Control` (``submit`` reuses its SSH connection)."""
    run = ctl.store.resolve(run_ref)

    def reconnecting(why: str) -> None:
        err.print(f"[tcl] connection lost ({why}); reconnecting…", markup=False)

    return await follow(ctl, run, lambda e: print_event(e, timestamps), reconnecting, after=after)


def detached(run_ref: str) -> int:
    err.print(f"\ndetached; the job keeps running. Re-attach: tcl logs -f {run_ref}", markup=False)
    return 130


def finished(final: Run) -> int:
    """Print the outcome; return the exit code the CLI should exit with."""
    detail = f" (exit code {final.exit_code})" if final.exit_code is not None else ""
    err.print(f"[tcl] run {final.id} {final.state.value}{detail}", markup=False)
    return exit_code_of(final)
