"""``tcl matrix add|status|ls|requeue|cancel|export``: sweeps of many runs.

``add`` records the entries (a manifest file or a ``--grid``), snapshots the code once, and
makes sure a ``tcl serve`` runs here to schedule them (it starts one, as ``tcl submit`` does).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tcl.agentenv import submitter_env
from tcl.cli import matrix_show
from tcl.cli._common import err, fail, globals_of, out, print_json
from tcl.cli.matrix_show import opened_queue
from tcl.cli.placementopts import AvoidClusterOpt, ClusterOpt
from tcl.cli.retryopts import RETRY_BACKOFF_HELP, RETRY_HELP, RETRY_ON_HELP, retry_policy
from tcl.cli.submitargs import job_reference, pairs
from tcl.control.lifecycle.retry_policy import RetryPolicy
from tcl.control.sweep.spec import MatrixSpec

if TYPE_CHECKING:
    from tcl.control.service import Control

app = typer.Typer(
    name="matrix", help="Sweeps: many runs from one manifest or grid.", no_args_is_help=True
)


def _start_scheduler(no_start: bool) -> str:
    if no_start or os.environ.get("TCL_SERVE") == "0":
        return "not starting a scheduler (--no-start): `tcl serve` places the entries"
    from tcl.control.daemon.client import ensure_daemon

    client = ensure_daemon()
    return f"tcl serve (pid {client.pid}) schedules them"


@app.command("add")
def cmd_add(
    ctx: typer.Context,
    items: Annotated[
        list[str] | None,
        typer.Argument(
            help="FILE (a JSON/YAML list of entries, each with a job_id; none with --grid), "
            "then the command template after `--`, its {field}s filled from each entry.",
        ),
    ] = None,
    name: Annotated[str, typer.Option("--name", help="The matrix's name.")] = "",
    grid: Annotated[
        list[str] | None, typer.Option("--grid", help="KEY=V1,V2 (repeatable: the product).")
    ] = None,
    where: Annotated[
        list[str] | None, typer.Option("--where", help="KEY=VALUE[,VALUE]: only these entries.")
    ] = None,
    chip: Annotated[str | None, typer.Option("--chip", help="Chip type per entry.")] = None,
    n: Annotated[int, typer.Option("-n", "--chips", min=0, help="Chips per entry.")] = 0,
    nodes: Annotated[int, typer.Option("--nodes", min=0, help="Nodes per entry.")] = 0,
    host: Annotated[str | None, typer.Option("--host", help="Only this host.")] = None,
    cluster: ClusterOpt = None,
    avoid_cluster: AvoidClusterOpt = None,
    image: Annotated[str | None, typer.Option("--image", help="Container image.")] = None,
    env: Annotated[
        list[str] | None,
        typer.Option("--env", help="KEY=VALUE, or KEY: this shell's value (repeatable)."),
    ] = None,
    priority: Annotated[
        int, typer.Option("--priority", help="Higher runs first (across matrices).")
    ] = 0,
    retry: Annotated[int, typer.Option("--retry", min=1, help=RETRY_HELP)] = 1,
    retry_on: Annotated[list[int] | None, typer.Option("--retry-on", help=RETRY_ON_HELP)] = None,
    retry_backoff_s: Annotated[
        float, typer.Option("--retry-backoff-s", min=0, help=RETRY_BACKOFF_HELP)
    ] = 10.0,
    job: Annotated[
        str | None, typer.Option("--job", help="A tcl.jobs job; entry fields override config.")
    ] = None,
    job_config: Annotated[
        str | None, typer.Option("--job-config", help="The job's base config YAML.")
    ] = None,
    max_duration_s: Annotated[
        float | None, typer.Option("--max-duration-s", min=1, help="Stop an entry's run after.")
    ] = None,
    no_start: Annotated[
        bool, typer.Option("--no-start", help="Only record: do not start a local scheduler.")
    ] = False,
    append: Annotated[
        bool,
        typer.Option(
            "--append",
            help="Add to the matrix of this name (same command and chips): only job_ids it lacks.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Add a matrix: tcl matrix add matrix.json --name ft --chip h100 -- python train.py
    --lr {lr} --seed {seed}   (--append: add the job_ids a grown manifest has to it)"""
    from tcl.control.errors import TclError
    from tcl.control.sweep import manifest as entries_of
    from tcl.control.sweep.queue import NewEntry
    from tcl.control.sweep.shellsafe import check_field_env

    items = items or []
    manifest, command = (None, items) if grid else (items[0] if items else None, items[1:])
    if not name:
        raise fail("--name NAME is needed (tcl matrix status NAME shows it later)")
    if manifest is None and not grid:
        raise fail("no entries: tcl matrix add FILE --name NAME -- CMD, or --grid KEY=V1,V2")
    job_ref = job_reference(job, job_config, command)
    if not command and job_ref is None:
        raise fail("nothing to run: tcl matrix add ... -- COMMAND {field}... (or --job KEY)")
    chip = chip.lower() if chip else None
    chips = n if n or chip is None else 1
    path, named = globals_of(ctx).config_location()
    try:
        entries = (
            entries_of.load_manifest(Path(manifest))
            if manifest is not None
            else entries_of.grid(grid or [])
        )
        entries = entries_of.where(entries, where or [])
        if not entries:
            raise fail("no entries left to add (see --where)")
        if command:
            entries_of.check_template(command, entries)
        check_field_env(entries)  # each field reaches the run as TCL_FIELD_<NAME>
        spec = MatrixSpec(
            argv=command,
            job=job_ref,
            chip=chip,
            chips=chips,
            nodes=nodes,
            host=host,
            clusters=cluster or [],
            avoid_clusters=avoid_cluster or [],
            image=image,
            env=pairs(env or []),
            submitter_base=submitter_env(os.environ),
            retry=retry_policy(retry, retry_on, retry_backoff_s) or RetryPolicy(),
            max_duration_s=max_duration_s,
            code_sha256="",
            config_path=path,
            config_named=named,
        )
        if chip and chips:
            _refuse_a_chip_no_host_has(ctx, chip, host)
        spec = _with_code(ctx, spec)
        with opened_queue() as queue:
            added = queue.add(
                name,
                spec.model_dump(mode="json"),
                [
                    NewEntry(
                        str(e["job_id"]), {k: v for k, v in e.items() if k != "job_id"}, priority
                    )
                    for e in entries
                ],
                append=append,
            )
        started = _start_scheduler(no_start)
    except TclError as e:
        raise fail(str(e), e.exit_code) from None
    if as_json:
        print_json(
            {
                "matrix": name,
                "added": added.added,
                "existing": added.existing,
                "code_sha256": spec.code_sha256,
            }
        )
        return
    already = f" ({added.existing} already there, left as they were)" if added.existing else ""
    err.print(f"added {added.added} entries to matrix {name}{already}; {started}", markup=False)
    err.print(f"  tcl matrix status {name}    tcl ps --matrix {name}", markup=False)


def _refuse_a_chip_no_host_has(ctx: typer.Context, chip: str, pin: str | None) -> None:
    """A sweep no host could ever run is refused here, not left queued for ever."""
    from tcl.cli._common import with_control
    from tcl.control.chipcheck import hosts_lacking

    lacking = with_control(ctx, lambda ctl: hosts_lacking(ctl, chip, pin))
    if lacking is not None:
        where = "\n".join(f"  {line}" for line in lacking) or "  (no host)"
        raise fail(f"no host here could ever run --chip {chip}; the hosts have:\n{where}", 2)


def _with_code(ctx: typer.Context, spec: MatrixSpec) -> MatrixSpec:
    """The code, snapshotted once for every entry (into the code cache the scheduler reads)."""
    from tcl.control.lifecycle.place import job_cwd
    from tcl.control.paths import cache_dir
    from tcl.control.shipping import snapshot

    cfg = globals_of(ctx).config()
    snap = snapshot(Path.cwd(), cache_dir(), cfg.shipping.max_bytes, cfg.shipping.cache_max_bytes)
    return spec.model_copy(
        update={"code_sha256": snap.sha256, "job_cwd": job_cwd(Path.cwd(), snap.root)}
    )


@app.command("requeue")
def cmd_requeue(
    name: Annotated[str, typer.Argument(help="The matrix.")],
    failed: Annotated[bool, typer.Option("--failed", help="Failed entries.")] = False,
    state: Annotated[
        list[str] | None, typer.Option("--state", help="Entries in this state (repeatable).")
    ] = None,
    ids: Annotated[
        list[str] | None, typer.Option("--ids", help="These job_ids (repeatable).")
    ] = None,
    no_start: Annotated[bool, typer.Option("--no-start", help="Do not start a scheduler.")] = False,
) -> None:
    """Queue failed (or cancelled, or done) entries again, each as a new run."""
    from tcl.control.errors import TclError
    from tcl.control.sweep.model import REQUEUE_FROM, EntryState

    states: set[EntryState] = set()
    if failed:
        states.add(EntryState.FAILED)
    for s in state or []:
        try:
            st = EntryState(s)
        except ValueError:
            raise fail(f"--state {s}: one of {', '.join(x.value for x in REQUEUE_FROM)}") from None
        if st not in REQUEUE_FROM:
            raise fail(
                f"--state {s}: only final entries are queued again "
                f"({', '.join(x.value for x in REQUEUE_FROM)})"
            )
        states.add(st)
    if ids and not states:
        states = set(REQUEUE_FROM)
    if not states:
        raise fail("which entries? --failed, --state STATE or --ids JOB_ID")
    try:
        with opened_queue() as queue:
            queue.matrix(name)
            moved = queue.requeue(name, sorted(states), ids)
        started = _start_scheduler(no_start) if moved else "nothing to do"
    except TclError as e:
        raise fail(str(e), e.exit_code) from None
    err.print(f"queued {len(moved)} entries of {name} again; {started}", markup=False)


@app.command("cancel")
def cmd_cancel(
    ctx: typer.Context, name: Annotated[str, typer.Argument(help="The matrix.")]
) -> None:
    """Cancel every entry not ended yet; stop the runs of those running."""
    import time

    from tcl.control.errors import TclError

    try:
        with opened_queue() as queue:
            queue.matrix(name)
            cancelled_at = time.time()
            cancelled = queue.cancel(name)
    except TclError as e:
        raise fail(str(e), e.exit_code) from None
    # counted from the cancel's own transaction: a count read before it races the scheduler.
    # Every entry's run, a queued one's too: one sent back to its queue (a retry, a lost node)
    # has a run that would stay pending in `tcl ps`; one never placed has none (not found).
    stopped = _stop_runs(ctx, [e.run_id for e in cancelled if e.run_id], cancelled_at)
    out.print(f"cancelled {len(cancelled)} entries of {name}; stopped {stopped} runs", markup=False)


def _stop_runs(ctx: typer.Context, run_ids: list[str], cancelled_at: float) -> int:
    """How many of ``run_ids`` were stopped: here, or by their scheduler, which sees the
    cancel at its next heartbeat and may get there first."""
    if not run_ids:
        return 0
    from tcl.cli._common import with_control

    async def body(ctl: Control) -> int:
        import asyncio

        from tcl.control.errors import RunNotFoundError
        from tcl.control.lifecycle.stop import stop
        from tcl.control.states import RunState

        async def one(run_id: str) -> int:
            try:
                run = ctl.store.get_run(run_id)
            except RunNotFoundError:
                return 0
            if run.state.is_final:
                stopped_by_scheduler = run.state is RunState.TERMINATED
                return int(stopped_by_scheduler and run.updated_at >= cancelled_at)
            await stop(ctl, run, grace_s=5.0)
            return 1

        return sum(await asyncio.gather(*(one(r) for r in run_ids)))

    return int(with_control(ctx, body))


def register(root: typer.Typer) -> None:
    app.command("status")(matrix_show.cmd_status)
    app.command("ls")(matrix_show.cmd_ls)
    app.command("export")(matrix_show.cmd_export)
    root.add_typer(app)
