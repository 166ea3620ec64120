"""``tcl ui [--port P] [--no-browser] [--allow-actions]``: a local dashboard of runs, sweeps and
hosts in the browser (read-only unless ``--allow-actions``)."""

from __future__ import annotations

from typing import Annotated

import typer

from tcl.cli._common import fail, globals_of, run


def _start_scheduler() -> str:
    """Requeued entries need a `tcl serve` to place them (as `tcl matrix requeue` makes sure)."""
    import os

    if os.environ.get("TCL_SERVE") == "0":
        return "not starting a scheduler (TCL_SERVE=0): `tcl serve` places the entries"
    from tcl.control.daemon.client import ensure_daemon

    return f"tcl serve (pid {ensure_daemon().pid}) schedules them"


def cmd_ui(
    ctx: typer.Context,
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="Loopback port (default: any free).")
    ] = 0,
    no_browser: Annotated[
        bool, typer.Option("--no-browser", help="Only print the URL; open no browser.")
    ] = False,
    allow_actions: Annotated[
        bool, typer.Option("--allow-actions", help="Let the page stop runs and requeue entries.")
    ] = False,
) -> None:
    """Serve a dashboard on 127.0.0.1: runs, logs, metrics, sweeps, hosts. The URL (printed
    first) carries a fresh token; Ctrl-C stops it."""
    from tcl.control.errors import TclError
    from tcl.control.paths import db_url
    from tcl.control.store import Store
    from tcl.ui.server import serve

    g = globals_of(ctx)
    try:
        g.config()  # a broken config is one line now, not an error on every page
        store = Store(db_url())
    except TclError as e:
        raise fail(str(e), e.exit_code) from None
    try:
        run(
            serve(
                store,
                g.config,
                port=port,
                allow_actions=allow_actions,
                open_browser=not no_browser,
                start_scheduler=_start_scheduler,
            )
        )
    except KeyboardInterrupt:
        pass
    except OSError as e:
        raise fail(f"cannot serve on 127.0.0.1:{port}: {e.strerror or e}") from None
    finally:
        store.close()


def register(app: typer.Typer) -> None:
    app.command("ui")(cmd_ui)
