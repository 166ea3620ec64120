"""Following a run from the CLI (shared by ``submit`` and ``logs -f``): Ctrl-C detaches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tcl.cli._common import err
from tcl.cli.render import print_event
from tcl.control.states import RunState

if TYPE_CHECKING:
    from tcl.control.logcache import KeptEvent
    from tcl.control.service import Control
    from tcl.control.store import Run


def exit_code_of(state: RunState, exit_code: int | None) -> int:
    if state is RunState.SUCCEEDED:
        return 0
    if exit_code:
        return exit_code
    return 1


async def follow_with(
    ctl: Control,
    run_ref: str,
    timestamps: bool,
    after: int = 0,
    node: int | None = None,
    raw: bool = False,
) -> Run:
    """Follow on an open :class:`Control` (``submit`` reuses its SSH connection) and print the
    outcome once the host has released the task. ``raw``: the job's control sequences as they
    are (``tcl logs --raw``)."""
    # the control plane: only where it runs in-process
    from tcl.control.lifecycle.follow import follow

    run = ctl.store.resolve(run_ref)

    def show(e: KeptEvent) -> None:
        if node is None or e.node == node:
            print_event(e, timestamps, raw)

    final = await follow(ctl, run, show, reconnecting, after=after)
    report_end(final.id, final.state, final.exit_code)
    return final


def reconnecting(why: str) -> None:
    err.print(f"[tcl] connection lost ({why}); reconnecting…", markup=False)


def detached(run_ref: str) -> int:
    err.print(f"\ndetached; the job keeps running. Re-attach: tcl logs -f {run_ref}", markup=False)
    return 130


def finished(final: Run) -> int:
    """The exit code for a followed run (its outcome was printed when it ended)."""
    return exit_code_of(final.state, final.exit_code)


def report_end(run_id: str, state: RunState, exit_code: int | None) -> int:
    """Print the outcome; return the exit code the CLI should exit with."""
    detail = f" (exit code {exit_code})" if exit_code is not None else ""
    err.print(f"[tcl] run {run_id} {state.value}{detail}", markup=False)
    return exit_code_of(state, exit_code)
