"""``tcl checkpoints [RUN]``: the checkpoints under an output dir, as paths for ``--restore``.

Reads the files only (``tcl.jobs.layout``): no JAX. The output dir is the one ``tcl run`` and
``python -m tcl.jobs.launch`` were given; a submitted job's is on its host (``$TCL_OUT_DIR``,
else ``out`` in its working dir), so run this where that dir is.
"""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tcl.cli._common import err, out, print_json


def cmd_checkpoints(
    run: Annotated[
        str | None,
        typer.Argument(help="Only this run: a run id, name, project or group in the path."),
    ] = None,
    out_dir: Annotated[
        str, typer.Option("-o", "--out", help="The output dir (holds checkpoints/).")
    ] = "out",
    as_json: Annotated[bool, typer.Option("--json", help="JSON list (stable).")] = False,
) -> None:
    """List complete checkpoints: the RESTORE column is what --restore takes."""
    from tcl.jobs.layout import catalog

    root = Path(out_dir) / "checkpoints"
    rows = catalog(root)
    if run is not None:
        rows = [r for r in rows if run in r.restore.split("/")]
    if as_json:
        print_json([dataclasses.asdict(r) for r in rows])
        return
    if not rows:  # an answer, not an error: a script tests the JSON list or the exit code 0
        where = f" of {run!r}" if run is not None else ""
        err.print(f"no checkpoints{where} under {root}", markup=False)
        return
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("RESTORE", "STEP", "LATEST", "JOB", "SAVED"):
        t.add_column(col, overflow="fold")
    for r in rows:
        saved = datetime.datetime.fromtimestamp(r.saved_at).strftime("%Y-%m-%d %H:%M:%S")
        step = "" if r.step is None else str(r.step)
        t.add_row(r.restore, step, "latest" if r.latest else "", r.job or "", saved)
    out.print(t)


def register(app: typer.Typer) -> None:
    app.command("checkpoints")(cmd_checkpoints)
