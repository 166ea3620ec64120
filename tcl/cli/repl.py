"""``tcl repl``: Jupyter Lab in a run, reached through a local port (and ``--sync``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tcl.agentenv import submitter_env
from tcl.cli._common import err, fail, globals_of, out, with_control
from tcl.cli.placementopts import (
    AvoidClusterOpt,
    ChipOpt,
    ChipsOpt,
    ClusterOpt,
    DirOpt,
    EnvOpt,
    HostOpt,
    ImageOpt,
    NameOpt,
    SecretOpt,
)

if TYPE_CHECKING:
    from tcl.control.service import Control

RUN_POLL_S = 2.0


def cmd_repl(
    ctx: typer.Context,
    attach: Annotated[
        str | None,
        typer.Option("--attach", metavar="RUN", help="Re-open the forward to a running session."),
    ] = None,
    sync: Annotated[
        bool, typer.Option("--sync", help="Push every save of the working tree (tcl sync --watch).")
    ] = False,
    no_browser: Annotated[bool, typer.Option("--no-browser", help="Only print the URL.")] = False,
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Local port (default: any free one).")
    ] = 0,
    name: NameOpt = "",
    chip: ChipOpt = None,
    n: ChipsOpt = 0,
    host: HostOpt = None,
    cluster: ClusterOpt = None,
    avoid_cluster: AvoidClusterOpt = None,
    image: ImageOpt = None,
    env: EnvOpt = None,
    secret: SecretOpt = None,
    code_dir: DirOpt = None,
    max_duration_s: Annotated[
        float | None, typer.Option("--max-duration-s", min=1, help="End the session after this.")
    ] = None,
    timeout_s: Annotated[
        float, typer.Option("--timeout-s", min=1, help="How long to wait for Jupyter to answer.")
    ] = 600.0,
) -> None:
    """Start Jupyter Lab on the best free host and forward it: tcl repl --chip h100 --sync"""
    if attach is None:
        from tcl.cli.submit import start_run
        from tcl.cli.submitargs import pairs, secrets_of
        from tcl.control.daemon.api import SubmitRequest
        from tcl.runner.api import SessionKind

        if code_dir is not None and not os.path.isdir(code_dir):
            raise fail(f"--dir {code_dir}: not a directory")
        path, named = globals_of(ctx).config_location()
        chip = chip.lower() if chip else None
        req = SubmitRequest(
            config_path=path,
            config_named=named,
            cwd=os.getcwd(),
            code_dir=os.path.abspath(code_dir) if code_dir is not None else None,
            name=name,
            chip=chip,
            chips=n if n or chip is None else 1,
            nodes=1,
            host=host,
            clusters=cluster or [],
            avoid_clusters=avoid_cluster or [],
            image=image,
            env=pairs(env or []),
            submitter_base=submitter_env(os.environ),
            secrets=secrets_of(secret or []),
            max_duration_s=max_duration_s,
            follow=False,
            session=SessionKind.JUPYTER,
        )
        run_ref = start_run(req).run_id
        # The base of `tcl sync`: the tree the session was shipped, from this directory.
        base: Path | None = Path(code_dir or os.getcwd())
    else:
        run_ref, base = attach, None
    progress: dict[str, bool] = {}
    try:  # from the moment the run exists: a Ctrl-C while its base is recorded stops it too
        if base is not None:
            with_control(ctx, lambda ctl: _record_base(ctl, run_ref, base))
        with_control(
            ctx, lambda ctl: _serve(ctl, run_ref, sync, no_browser, port, timeout_s, progress)
        )
    except KeyboardInterrupt:  # Ctrl-C: the forward is closed
        if progress.get("ready") or attach is not None:
            _after_interrupt(ctx, run_ref)
        else:  # still waiting (in a scheduler's queue, starting): nothing to keep yet
            state = _stop(ctx, run_ref)
            err.print(f"run {run_ref} {state}: cancelled while it waited", markup=False)
            raise typer.Exit(130) from None


async def _record_base(ctl: Control, run_ref: str, start: Path) -> None:
    from tcl.control import syncing

    syncing.begin(ctl, run_ref, start)


async def _serve(
    ctl: Control,
    run_ref: str,
    sync: bool,
    no_browser: bool,
    port: int,
    timeout_s: float,
    progress: dict[str, bool],
) -> str:
    """Forward a local port to the run's Jupyter until the run ends (returns its id);
    ``progress["ready"]`` once the session answered."""
    import asyncio
    import contextlib

    from tcl.control import interactive, syncing

    run = ctl.store.resolve(run_ref)
    tgt, info = await interactive.wait_ready(
        ctl, run.id, timeout_s, lambda why: err.print(f"waiting: {why}", markup=False)
    )
    progress["ready"] = True
    fwd = interactive.forward(
        tgt, port, on_reconnect=lambda why: err.print(f"forward: {why}", markup=False)
    )
    local = await fwd.start()
    url = f"http://localhost:{local}/lab?token={info.token}"
    out.print(url, markup=False, highlight=False)
    sys.stdout.flush()
    err.print(
        f"Jupyter of run {run.id} ({info.python}); Ctrl-C to close the forward "
        f"(then: stop the session, or leave it for `tcl repl --attach {run.id}`)",
        markup=False,
    )
    if not no_browser:
        import webbrowser

        with contextlib.suppress(Exception):
            webbrowser.open(url)
    watcher = asyncio.create_task(syncing.watch(ctl, run.id, _say)) if sync else None
    try:
        while not ctl.store.get_run(run.id).state.is_final:
            await asyncio.sleep(RUN_POLL_S)
        final = ctl.store.get_run(run.id)
        err.print(f"run {run.id} {final.state.value}: the session has ended", markup=False)
        return run.id
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(BaseException):
                await watcher
        await fwd.aclose()


def _say(text: str) -> None:
    err.print(text, markup=False, highlight=False)


def _after_interrupt(ctx: typer.Context, run_ref: str) -> None:
    """Ctrl-C: stop the session, or leave it running (asked at a terminal; left otherwise)."""
    stop = sys.stdin.isatty() and typer.confirm(
        "Stop the session (its unsaved notebooks are lost)?", default=False, err=True
    )
    if not stop:
        err.print(
            f"left running: tcl repl --attach {run_ref}   stop: tcl stop {run_ref}", markup=False
        )
        raise typer.Exit(0)

    err.print(f"run {run_ref} {_stop(ctx, run_ref)}", markup=False)


def _stop(ctx: typer.Context, run_ref: str) -> str:
    """Stop the run (on SLURM a scancel, queued or not: no allocation is left behind)."""

    async def go(ctl: Control) -> str:
        from tcl.control.lifecycle.stop import stop as stop_run

        return (await stop_run(ctl, ctl.store.resolve(run_ref), 10.0)).state.value

    return with_control(ctx, go)


def register(app: typer.Typer) -> None:
    app.command("repl")(cmd_repl)
