"""``tcl matrix status|ls|export``: how far sweeps are (the lead mounts these on ``tcl matrix``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from tcl.cli._common import err, fail, out, print_json, served_or_here
from tcl.cli.termsafe import cell
from tcl.control.errors import TclError
from tcl.control.matrixlisting import MatrixStatus, MatrixStatusListing, MatrixStatusRequest
from tcl.control.runlisting import age

if TYPE_CHECKING:
    from rich.table import Table

    from tcl.control.sweep.queue import SweepQueue

T = TypeVar("T")
_BAR_WIDTH = 30


@contextmanager
def opened_queue() -> Iterator[SweepQueue]:
    """The state store's sweep queue, closed (with the store) on leaving."""
    from tcl.control.paths import db_url
    from tcl.control.store import Store
    from tcl.control.sweep.queue import SweepQueue

    store = Store(db_url())
    try:
        queue = SweepQueue(store)
        try:
            yield queue
        finally:
            queue.close()
    finally:
        store.close()


def _read(body: Callable[[SweepQueue], T]) -> T:
    """Run ``body`` on the sweep queue; a ``TclError`` is one line and a non-zero exit."""
    try:
        with opened_queue() as queue:
            return body(queue)
    except TclError as e:
        raise fail(str(e), e.exit_code) from None


def _duration(seconds: float) -> str:
    s = round(seconds)
    if s >= 86400:
        return f"{s // 86400}d {s % 86400 // 3600}h"
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 60}m {s % 60:02d}s"


def bar(fraction: float, width: int = _BAR_WIDTH) -> str:
    """A text bar that reads without colour (NO_COLOR): ``#`` filled, ``-`` left."""
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def _status_lines(s: MatrixStatus) -> list[str]:
    fraction = s.ended / s.total if s.total else 0.0
    counts = "  ".join(f"{state} {n}" for state, n in s.counts.items())
    rate = f"{s.runs_per_hour:.1f} runs/h"
    eta = "ETA -" if s.eta_s is None else f"ETA {_duration(s.eta_s)}"
    lines = [
        f"{s.name}: {s.total} entries",
        f"  {counts}",
        f"  {bar(fraction)} {s.ended}/{s.total} ({fraction:.0%})  {rate}  {eta}",
    ]
    if s.failures:
        shown = len(s.failures)
        failed = s.counts["failed"]
        more = f", newest {shown}" if failed > shown else ""
        lines.append(f"  failed ({failed}{more}):")
        lines += [f"    {f.job_id}  {f.error or '(no error kept)'}" for f in s.failures]
    return lines


def _status(req: MatrixStatusRequest) -> MatrixStatusListing:
    """From the daemon when one answers (it holds the store open); else read here."""

    def here() -> MatrixStatusListing:
        from tcl.control.matrixlisting import matrix_status

        return _read(lambda queue: matrix_status(queue, req))

    return served_or_here(lambda client: client.matrix_status(req), here)


def cmd_status(
    name: Annotated[str | None, typer.Argument(help="The matrix (default: all).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="JSON (stable).")] = False,
) -> None:
    """How far a matrix is: entries by state, progress, runs/hour, ETA, failures."""
    summaries = _status(MatrixStatusRequest(name=name)).matrices
    if json_out:
        data = [s.json_form() for s in summaries]
        print_json(data[0] if name is not None else data)
        return
    if not summaries:
        err.print("no matrices (tcl matrix add makes one)")
        return
    for i, s in enumerate(summaries):
        if i:
            out.print()
        for line in _status_lines(s):
            out.print(cell(line))  # names, job ids, errors: shown literally


def _ls_table(queue: SweepQueue) -> tuple[Table, list[dict[str, object]]]:
    from rich.table import Table

    from tcl.control.sweep.model import EntryState
    from tcl.control.sweep.progress import iso

    counts = queue.counts()
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("NAME", "ENTRIES", "QUEUED", "RUNNING", "DONE", "FAILED", "CANCELLED"):
        t.add_column(col, overflow="fold", justify="left" if col == "NAME" else "right")
    t.add_column("CREATED")
    rows: list[dict[str, object]] = []
    for m in queue.matrices():
        c = {st: counts.get(m.name, {}).get(st, 0) for st in EntryState}
        held = c[EntryState.CLAIMED] + c[EntryState.RUNNING]
        total = sum(c.values())
        t.add_row(
            cell(m.name),
            str(total),
            str(c[EntryState.QUEUED]),
            str(held),
            str(c[EntryState.DONE]),
            str(c[EntryState.FAILED]),
            str(c[EntryState.CANCELLED]),
            age(m.created_at),
        )
        rows.append(
            {
                "name": m.name,
                "entries": total,
                "counts": {st.value: n for st, n in c.items()},
                "created_at": iso(m.created_at),
            }
        )
    return t, rows


def cmd_ls(
    json_out: Annotated[bool, typer.Option("--json", help="JSON list (stable).")] = False,
) -> None:
    """List matrices with their entries by state (RUNNING counts claimed entries too)."""
    table, rows = _read(_ls_table)
    if json_out:
        print_json(rows)
    elif rows:
        out.print(table)
    else:
        err.print("no matrices (tcl matrix add makes one)")


def cmd_export(
    name: Annotated[str, typer.Argument(help="The matrix.")],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write here (default: stdout).")
    ] = None,
) -> None:
    """The matrix's entries as the seed's matrix_status.json (keyed by job_id)."""
    import json

    from tcl.control.sweep.progress import export

    data = _read(lambda queue: export(queue, name))
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if output is None:
        typer.echo(text, nl=False)
        return
    from tcl.atomic import write_atomic

    try:
        write_atomic(output, text, mode=0o644)
    except OSError as e:
        raise fail(f"cannot write {output}: {e.strerror or e}") from None
    err.print(f"wrote {len(data)} entries to {output}", markup=False)
