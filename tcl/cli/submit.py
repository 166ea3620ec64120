"""``tcl submit``: run a command on the best free host, then follow its logs.

By default the submit runs in the ``tcl serve`` daemon (started when none answers), which keeps
SSH connections warm between commands; ``TCL_SERVE=0`` runs it in this process instead.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tcl.agentenv import submitter_env
from tcl.cli import follow as follow_cmd
from tcl.cli._common import err, fail, globals_of, out, print_json
from tcl.cli.placementopts import (
    AvoidClusterOpt,
    ChipOpt,
    ChipsOpt,
    ClusterOpt,
    DirOpt,
    EnvOpt,
    GroupOpt,
    HostOpt,
    ImageOpt,
    NameOpt,
    ProjectEnvOpt,
    SecretOpt,
)
from tcl.cli.render import RichObserver
from tcl.cli.retryopts import RETRY_BACKOFF_HELP, RETRY_HELP, RETRY_ON_HELP, retry_policy
from tcl.cli.submitargs import (
    backend_options,
    check_job,
    job_reference,
    pairs,
    secrets_of,
    volcano_options,
)
from tcl.control.daemon.api import SubmitRequest
from tcl.control.errors import ConfirmationNeededError, DaemonError, SubmitCancelled, TclError
from tcl.control.submitted import SubmitResult

if TYPE_CHECKING:
    from tcl.control.store import Run


def result_json(r: SubmitResult) -> dict[str, object]:
    """The stable JSON form of a submit (documented in docs/cli.md)."""
    return {
        "run_id": r.run_id,
        "name": r.name,
        "host": r.host,
        "backend": r.backend,
        "task_id": r.task_id,
        "accelerators": r.accelerators,  # node 0's indices
        "nodes": r.nodes,
        "state": r.state,  # running, or queued (a scheduler holds it)
        "code": {
            "sha256": r.code_sha256,
            "bytes": r.code_bytes,
            "uploaded_bytes": r.uploaded_bytes,
        },
        "skipped": [{"host": h, "reason": why} for h, why in r.skipped],
        "commands": {
            "logs": f"tcl logs -f {r.run_id}",
            "ssh": f"tcl ssh {r.run_id}" if r.ssh else None,
            "stop": f"tcl stop {r.run_id}",
        },
    }


Announce = Callable[[SubmitResult], None]


def cmd_submit(
    ctx: typer.Context,
    command: Annotated[
        list[str] | None, typer.Argument(help="The command to run, after `--`.")
    ] = None,
    name: NameOpt = "",
    chip: ChipOpt = None,
    n: ChipsOpt = 0,
    nodes: Annotated[
        int,
        typer.Option(
            "--nodes",
            min=0,
            help="Nodes of one host group (default: as many as the chips need).",
        ),
    ] = 0,
    host: HostOpt = None,
    cluster: ClusterOpt = None,
    avoid_cluster: AvoidClusterOpt = None,
    image: ImageOpt = None,
    env: EnvOpt = None,
    secret: SecretOpt = None,
    group: GroupOpt = None,
    project_env: ProjectEnvOpt = True,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Follow logs (default).")] = False,
    detach: Annotated[bool, typer.Option("-d", "--detach", help="Return once started.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    job: Annotated[
        str | None,
        typer.Option("--job", help="Run a registered tcl.jobs job (see `tcl jobs`), no COMMAND."),
    ] = None,
    job_config: Annotated[
        str | None,
        typer.Option(
            "--job-config", help="The job's config YAML (its `job:` names the job: --job optional)."
        ),
    ] = None,
    restore: Annotated[
        str | None,
        typer.Option(
            "--restore",
            help="With --job: start from this checkpoint (a path under the host's "
            "OUT/checkpoints; see `tcl checkpoints`).",
        ),
    ] = None,
    code_dir: DirOpt = None,
    committed: Annotated[
        bool,
        typer.Option(
            "--committed",
            help="Ship the repository's HEAD as committed, not the working tree (what is not "
            "committed is listed, and left out).",
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the plan (host, nodes, chips per node) and what would be sent; "
            "start nothing.",
        ),
    ] = False,
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="Create billed cloud resources (a TPU node) unasked."),
    ] = False,
    down: Annotated[
        bool, typer.Option("--down", help="Delete a cloud node the run used when it ends.")
    ] = False,
    tpu_version: Annotated[
        str | None, typer.Option("--tpu-version", help="TPU software version of a new node.")
    ] = None,
    tpu_spot: Annotated[
        bool | None,
        typer.Option("--tpu-spot/--tpu-on-demand", help="Spot pricing for a new TPU node."),
    ] = None,
    tpu_preemptible: Annotated[
        bool | None,
        typer.Option("--tpu-preemptible/--tpu-no-preemptible", help="A preemptible new TPU node."),
    ] = None,
    volcano_image: Annotated[
        str | None,
        typer.Option("--volcano-image", help="The image a volcano host's pods run (one run)."),
    ] = None,
    volcano_namespace: Annotated[
        str | None,
        typer.Option("--volcano-namespace", help="The namespace of a volcano host (one run)."),
    ] = None,
    retry: Annotated[int, typer.Option("--retry", min=1, help=RETRY_HELP)] = 1,
    retry_on: Annotated[list[int] | None, typer.Option("--retry-on", help=RETRY_ON_HELP)] = None,
    retry_backoff_s: Annotated[
        float, typer.Option("--retry-backoff-s", min=0, help=RETRY_BACKOFF_HELP)
    ] = 10.0,
) -> None:
    """Run COMMAND on the best free host: tcl submit --chip h100 -n 2 -- python train.py"""
    command = command or []
    job_ref = job_reference(job, job_config, command, restore)
    if not command and job_ref is None:
        raise fail("nothing to run: tcl submit [OPTIONS] -- COMMAND [ARGS...]")
    chip = chip.lower() if chip else None  # hosts report chips in lower case (h100)
    chips = n if n or chip is None else 1
    if code_dir is not None and not os.path.isdir(code_dir):
        raise fail(f"--dir {code_dir}: not a directory")
    if job_ref is not None:
        check_job(job_ref.key, code_dir)
    path, named = globals_of(ctx).config_location()
    req = SubmitRequest(
        # absolute: the daemon that reads them runs in a directory of its own
        config_path=path,
        config_named=named,
        cwd=os.getcwd(),
        code_dir=os.path.abspath(code_dir) if code_dir is not None else None,
        committed=committed,
        argv=command,
        name=name,
        chip=chip,
        chips=chips,
        nodes=nodes,
        host=host,
        clusters=cluster or [],
        avoid_clusters=avoid_cluster or [],
        image=image,
        env=pairs(env or []),
        submitter_base=submitter_env(os.environ),
        secrets=secrets_of(secret or []),
        uv_groups=group or [],
        project_env=project_env,
        job=job_ref,
        follow=(follow or not detach) and not (as_json and not follow),
        options={
            **backend_options(down, tpu_version, tpu_spot, tpu_preemptible),
            **volcano_options(volcano_image, volcano_namespace),
        },
        yes=yes,
        retry=retry_policy(retry, retry_on, retry_backoff_s),
    )
    if dry_run:
        raise typer.Exit(_dry_run(req))
    try:
        raise typer.Exit(_submit(req, as_json))
    except _Unconfirmed as e:
        if not _confirmed(str(e)):
            why = f"{e}\nnot confirmed: nothing was created (--yes confirms ahead)"
            raise fail(why, ConfirmationNeededError.exit_code) from None
        raise typer.Exit(_submit(req.model_copy(update={"yes": True}), as_json)) from None


class _Unconfirmed(Exception):
    """The plan needs the user's confirmation (ConfirmationNeededError's text)."""


def _confirmed(text: str) -> bool:
    import sys

    if not sys.stdin.isatty():
        return False
    return typer.confirm(f"{text}. Go ahead?", default=False, err=True)


def _submit(req: SubmitRequest, as_json: bool, announce: Announce | None = None) -> int:
    obs = RichObserver(enabled=not as_json)
    announce = announce or (lambda r: _announce(r, as_json))
    if os.environ.get("TCL_SERVE", "1") != "0":
        code = _served(req, obs, announce)
        if code is not None:
            return code
    return _in_process(req, obs, announce)


def start_run(req: SubmitRequest) -> SubmitResult:
    """Submit without following and return once the run started (or queued): the first step
    of ``tcl repl``. Errors exit as ``tcl submit``'s do."""
    got: list[SubmitResult] = []

    def announce(r: SubmitResult) -> None:
        got.append(r)
        _announce(r, False)

    code = _submit(req.model_copy(update={"follow": False}), False, announce)
    if not got:
        raise typer.Exit(code or 1)
    return got[0]


def _served(req: SubmitRequest, obs: RichObserver, announce: Announce) -> int | None:
    """The submit, run by the daemon; None when no daemon can be had (then in-process)."""
    from tcl.cli.served import submit_served
    from tcl.control.daemon.client import ensure_daemon

    try:
        client = ensure_daemon()
    except DaemonError as e:
        err.print(f"note: {e}; submitting from this process", markup=False)
        return None
    try:
        return submit_served(client, req, obs, announce)
    except SubmitCancelled as e:  # Ctrl-C before the run started, all of it cleaned up
        err.print(str(e), markup=False)
        return e.exit_code
    except TclError as e:
        if e.exit_code == ConfirmationNeededError.exit_code and not req.yes:
            raise _Unconfirmed(str(e)) from None
        raise fail(str(e), e.exit_code) from None


def _dry_run(req: SubmitRequest) -> int:
    """Solve and print what each plan would send; nothing is started or recorded."""
    from tcl.control.config import load_config_at
    from tcl.control.lifecycle.submit import dry_run, submission_from
    from tcl.control.service import Control

    async def go() -> str:
        ctl = Control(load_config_at(Path(req.config_path), req.config_named))
        try:
            return await dry_run(ctl, submission_from(req))
        finally:
            await ctl.aclose()

    import asyncio

    try:
        out.print(asyncio.run(go()), markup=False, highlight=False, end="")
    except TclError as e:
        raise fail(str(e), e.exit_code) from None
    return 0


def _in_process(req: SubmitRequest, obs: RichObserver, announce: Announce) -> int:
    from tcl.control.config import load_config_at
    from tcl.control.lifecycle.submit import submission_from, submit
    from tcl.control.service import Control

    sub = submission_from(req)
    state: dict[str, SubmitResult] = {}

    async def go() -> Run | None:
        ctl = Control(load_config_at(Path(req.config_path), req.config_named))
        try:
            try:
                res = await submit(ctl, sub, obs, check_job=False)
            finally:
                obs.close()
            state["res"] = res
            announce(res)
            if not req.follow:
                return None
            # same Control: the SSH connection and forwards made for the submit are reused
            return await follow_cmd.follow_with(ctl, res.run_id, timestamps=False)
        finally:
            await ctl.aclose()

    import asyncio  # only when it runs: a fast CLI start

    try:
        final = asyncio.run(go())
    except KeyboardInterrupt:
        if "res" in state:
            return follow_cmd.detached(state["res"].run_id)
        return 130
    except SubmitCancelled as e:  # Ctrl-C before the run started, all of it cleaned up
        err.print(str(e), markup=False)
        return e.exit_code
    except ConfirmationNeededError as e:
        raise _Unconfirmed(str(e)) from None
    except TclError as e:
        raise fail(str(e), e.exit_code) from None
    return 0 if final is None else follow_cmd.finished(final)


def _announce(res: SubmitResult, as_json: bool) -> None:
    for h, why in res.skipped:
        err.print(f"skipped {h}: {why}", markup=False)
    if as_json:
        print_json(result_json(res))
        return
    acc = f" (accelerators {','.join(map(str, res.accelerators))})" if res.accelerators else ""
    nodes = f", {res.nodes} nodes" if res.nodes > 1 else ""
    verb = "queued on" if res.state == "queued" else "started on"
    err.print(f"run {res.run_id} {verb} {res.host}{nodes}{acc}", markup=False)
    err.print(f"  logs: tcl logs -f {res.run_id}", markup=False)
    if res.ssh:
        err.print(f"  ssh:  tcl ssh {res.run_id}", markup=False)
    err.print(f"  stop: tcl stop {res.run_id}", markup=False)


def register(app: typer.Typer) -> None:
    app.command("submit", context_settings={"allow_interspersed_args": False})(cmd_submit)
