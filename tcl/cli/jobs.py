"""``tcl jobs`` (the registered ``tcl.jobs`` jobs) and ``tcl run`` (one in this process).

JAX is imported only by these commands, never by the rest of the CLI.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import Annotated

import typer

from tcl.cli._common import err, fail, out, print_json

# What the `jobs` extra installs (pyproject.toml): a tool install without it has none of them.
JOBS_EXTRA = ("jax", "jaxlib", "flax", "optax", "orbax", "numpy")


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a module set to None in sys.modules: not installed
        return False


@contextlib.contextmanager
def _jobs_extra() -> Iterator[None]:
    """A missing JAX library is an install to fix, said in one line, not a traceback."""
    try:
        yield
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top not in JOBS_EXTRA or _importable(top):
            raise  # the job's own import, or a part of an installed library: not this
        raise fail(
            f"this tcl has no {top}: `tcl jobs` and `tcl run` need the jobs extra "
            "(JAX, flax, optax, Orbax): uv tool install 'tcl-submit[jobs]' (or, in a checkout, "
            "uv sync --extra jobs). Submitting jobs to hosts needs none of it.",
            2,
        ) from None


def cmd_jobs(
    as_json: Annotated[bool, typer.Option("--json", help="JSON list (stable).")] = False,
) -> None:
    """List the jobs `tcl run` and `tcl submit --job` know: tcl's own and those this project
    declares (`[tool.tcl] jobs` in its pyproject.toml, or `tcl.jobs` entry points)."""
    from tcl.jobs.errors import JobsError

    try:
        with _jobs_extra():
            from tcl.jobs.registry import list_jobs

            rows = list_jobs()
    except JobsError as e:
        raise fail(str(e), 2) from None
    if as_json:
        print_json([{"key": j.key, "class": j.cls, "kind": j.kind, "doc": j.doc} for j in rows])
        return
    from rich.table import Table  # only where a table is drawn: a fast CLI start

    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("KEY", "KIND", "CLASS", "DESCRIPTION"):
        t.add_column(col, overflow="fold")
    for j in rows:
        t.add_row(j.key, j.kind, j.cls, j.doc)
    out.print(t)


@contextlib.contextmanager
def _progress_on_stderr() -> Iterator[None]:
    """tcl.jobs' own INFO lines (a metrics summary per report, progress) on stderr as they are
    logged, as the launcher shows them in a submitted job's log; libraries stay quiet."""
    logger = logging.getLogger("tcl")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # absl (imported with JAX) gives the root logger a handler too
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def cmd_run(
    key: Annotated[str, typer.Argument(help="Job key, e.g. gpt/train (see `tcl jobs`).")],
    config: Annotated[str, typer.Argument(help="Config YAML, or - for none.")],
    out_dir: Annotated[str, typer.Argument(help="Where checkpoints and logs go.")],
    overrides: Annotated[
        list[str] | None, typer.Argument(help="key=value overrides (a/b=1).")
    ] = None,
    restore: Annotated[
        str | None,
        typer.Option("--restore", help="Checkpoint path relative to OUT_DIR/checkpoints."),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Run name.")] = None,
    project: Annotated[str, typer.Option("--project")] = "default",
    group: Annotated[str, typer.Option("--group")] = "default",
) -> None:
    """Run a tcl.jobs job in this process (no agents, no hosts)."""
    from tcl.jobs.errors import JobsError

    try:
        with _jobs_extra(), _progress_on_stderr():
            from tcl.jobs.run import run_job

            run_job(
                key,
                None if config == "-" else config,
                out_dir,
                restore=restore,
                overrides=overrides or [],
                name=name,
                project=project,
                group=group,
            )
    except JobsError as e:
        raise fail(str(e), 2) from None
    except KeyboardInterrupt:
        err.print("interrupted", markup=False)
        raise typer.Exit(130) from None


def register(app: typer.Typer) -> None:
    app.command("jobs")(cmd_jobs)
    app.command("run")(cmd_run)
