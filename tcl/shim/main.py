"""``tcl-shim``: parse flags (each with an environment variable) and run the shim."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from tcl.shim.api import ExecutorKind
from tcl.shim.codegc import DEFAULT_MAX_BYTES as DEFAULT_CODE_CACHE_MAX_BYTES
from tcl.shim.derivedgc import DEFAULT_ENV_MAX_IDLE_S, DEFAULT_JAX_MAX_BYTES
from tcl.shim.server import SettingsError, ShimSettings, serve

app = typer.Typer(
    add_completion=False,
    help="tcl host agent: allocates accelerators and runs "
    "runner containers/processes. Listens on loopback; requires a bearer token.",
)


@app.command()
def run(
    host: Annotated[
        str, typer.Option(envvar="TCL_SHIM_HOST", help="Loopback address to listen on.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="TCL_SHIM_PORT", help="Port to listen on.")] = 10998,
    uds: Annotated[
        Path | None,
        typer.Option(
            envvar="TCL_SHIM_UDS",
            help="Listen on this Unix socket instead of --host/--port (made 0600; its directory "
            "must be this user's, mode 0700; other users' connections are dropped). The local "
            "default's shim listens this way.",
        ),
    ] = None,
    state_dir: Annotated[
        Path,
        typer.Option(
            envvar="TCL_SHIM_STATE_DIR", help="Where task.json files and runner state live."
        ),
    ] = Path("/var/lib/tcl-shim"),
    token_file: Annotated[
        Path,
        typer.Option(
            envvar="TCL_SHIM_TOKEN_FILE",
            help="Bearer token file: owned by the shim's user, mode 0600, not in a "
            "world-writable directory, at least 256 bits (e.g. 43 base64url characters); "
            "created with a random token if missing.",
        ),
    ] = Path("/var/lib/tcl-shim/token"),
    new_token: Annotated[
        bool,
        typer.Option(
            "--new-token",
            envvar="TCL_SHIM_NEW_TOKEN",
            help="Write a new random token to --token-file at start (a token read before the "
            "restart is then worthless; clients read the file again).",
        ),
    ] = False,
    executor: Annotated[
        ExecutorKind | None,
        typer.Option(
            envvar="TCL_SHIM_EXECUTOR",
            help="Default executor for tasks that name none (default: docker if reachable, "
            "else process).",
        ),
    ] = None,
    fake_accelerators: Annotated[
        str | None,
        typer.Option(
            envvar="TCL_SHIM_FAKE_ACCELERATORS",
            help="Pretend the host has these accelerators, e.g. h100:8 (tests; shown as fake).",
        ),
    ] = None,
    tpu_chip: Annotated[
        str | None,
        typer.Option(
            envvar="TCL_SHIM_TPU_CHIP",
            help="What this host's TPU chips (/dev/accel*, /dev/vfio/N) are called, e.g. tpu-v4: "
            "/dev does not tell the generation (default: from TPU_ACCELERATOR_TYPE, else tpu).",
        ),
    ] = None,
    runner_bin: Annotated[
        str | None,
        typer.Option(
            envvar="TCL_SHIM_RUNNER_BIN",
            help="tcl-runner executable for the process executor (default: beside this Python, "
            "else on PATH).",
        ),
    ] = None,
    reconcile_interval_s: Annotated[
        float,
        typer.Option(
            envvar="TCL_SHIM_RECONCILE_INTERVAL_S",
            min=0.05,
            help="Seconds between reconcile passes (exit detection, adoption, cleanup).",
        ),
    ] = 1.0,
    pull_stall_timeout_s: Annotated[
        float,
        typer.Option(
            envvar="TCL_SHIM_PULL_STALL_TIMEOUT_S",
            min=1,
            help="Abort an image pull that makes no progress for this long.",
        ),
    ] = 60.0,
    finished_retention_s: Annotated[
        float,
        typer.Option(
            envvar="TCL_SHIM_FINISHED_RETENTION_S",
            min=0,
            help="Keep a finished task's runner (serving its logs), container and files this "
            "long, unless its logs are fetched first; then remove them (the record stays).",
        ),
    ] = 600.0,
    record_retention_s: Annotated[
        float,
        typer.Option(
            envvar="TCL_SHIM_RECORD_RETENTION_S",
            min=0,
            help="Keep a finished task's record (its outcome, no logs) this long.",
        ),
    ] = 7 * 24 * 3600.0,
    runner_silence_limit_s: Annotated[
        float,
        typer.Option(
            envvar="TCL_SHIM_RUNNER_SILENCE_LIMIT_S",
            min=1,
            help="End a running task whose runner has not answered the shim's probe this long "
            "(frozen or wedged), freeing its accelerators.",
        ),
    ] = 30.0,
    code_cache_max_bytes: Annotated[
        int,
        typer.Option(
            envvar="TCL_SHIM_CODE_CACHE_MAX_BYTES",
            min=0,
            help="Size budget of the host's code: extracted trees (<state-dir>/code-cache) plus "
            "the tarballs in --code-tarballs. Least recently used code goes first; code a task "
            "still uses is never evicted.",
        ),
    ] = DEFAULT_CODE_CACHE_MAX_BYTES,
    jax_cache_max_bytes: Annotated[
        int,
        typer.Option(
            envvar="TCL_SHIM_JAX_CACHE_MAX_BYTES",
            min=0,
            help="Size budget of the jobs' JAX compilation cache (<code-cache>/jax): least "
            "recently used entries go first.",
        ),
    ] = DEFAULT_JAX_MAX_BYTES,
    env_max_idle_s: Annotated[
        float,
        typer.Option(
            envvar="TCL_SHIM_ENV_MAX_IDLE_S",
            min=0,
            help="Remove a job's project environment (<code-cache>/envs) unused this long; "
            "never one a job runs in.",
        ),
    ] = DEFAULT_ENV_MAX_IDLE_S,
    code_tarballs: Annotated[
        Path | None,
        typer.Option(
            envvar="TCL_SHIM_CODE_TARBALLS",
            help="The ssh backend's tarball cache (<shim_dir>/code), kept under the same budget.",
        ),
    ] = None,
    cluster_fs: Annotated[
        bool,
        typer.Option(
            "--cluster-fs/--no-cluster-fs",
            envvar="TCL_SHIM_CLUSTER_FS",
            help="Mount the cluster filesystems (JuiceFS) tasks ask for; --no-cluster-fs refuses "
            "such tasks (a host whose admin allows no FUSE mounts).",
        ),
    ] = True,
    runner_forkserver: Annotated[
        bool,
        typer.Option(
            "--runner-forkserver/--no-runner-forkserver",
            envvar="TCL_SHIM_RUNNER_FORKSERVER",
            help="Process executor: fork each task's runner from one started with the shim "
            "(imported once: no Python start on a submit's path, a few ms of CPU per runner); "
            "--no-runner-forkserver starts each runner as a new process.",
        ),
    ] = True,
    log_level: Annotated[
        str, typer.Option(envvar="TCL_SHIM_LOG_LEVEL", help="debug, info, warning or error.")
    ] = "info",
) -> None:
    """Run the shim."""
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per runner probe otherwise
    settings = ShimSettings(
        state_dir=state_dir,
        token_file=token_file,
        host=host,
        port=port,
        uds=uds,
        new_token=new_token,
        executor=executor,
        fake_accelerators=fake_accelerators,
        tpu_chip=tpu_chip,
        runner_bin=runner_bin,
        reconcile_interval_s=reconcile_interval_s,
        pull_stall_timeout_s=pull_stall_timeout_s,
        finished_retention_s=finished_retention_s,
        record_retention_s=record_retention_s,
        runner_silence_limit_s=runner_silence_limit_s,
        code_cache_max_bytes=code_cache_max_bytes,
        jax_cache_max_bytes=jax_cache_max_bytes,
        env_max_idle_s=env_max_idle_s,
        code_tarballs=code_tarballs,
        cluster_fs=cluster_fs,
        runner_forkserver=runner_forkserver,
    )
    try:
        serve(settings, log_level=log_level.lower())
    except SettingsError as e:
        typer.echo(f"tcl-shim: {e}", err=True)
        raise typer.Exit(2) from None


def main() -> None:
    app()


if __name__ == "__main__":
    main()
