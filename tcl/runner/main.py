"""``tcl-runner``: parse flags, call the library. Nothing heavy is imported before it is needed
(no JAX, asyncssh or docker on this path: start-up time is part of submit latency)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tcl.common.codecachelayout import COMPILE_CACHE, PROJECT_ENVS
from tcl.runner.limits import DEFAULT_GRACE_S, DEFAULT_START_TIMEOUT_S, MAX_GRACE_S

if TYPE_CHECKING:
    from tcl.runner.service import RunnerConfig

DEFAULT_PORT = 10999


def _grace(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value <= MAX_GRACE_S:
        raise argparse.ArgumentTypeError(f"must be between 0 and {MAX_GRACE_S:g} s")
    return value


def _env_path(name: str) -> Path | None:
    """A path flag's default: the variable ``name`` when set and not empty."""
    value = os.environ.get(name)
    return Path(value) if value else None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tcl-runner", description="The tcl in-container agent.")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--state-dir", type=Path, required=True, help="events, status, default working dir"
        )
        sp.add_argument("--max-code-bytes", type=int, default=None, help="code upload size limit")
        sp.add_argument(
            "--ssh-env-file",
            type=Path,
            default=_env_path("TCL_RUNNER_SSH_ENV_FILE"),
            help="write the job's working dir and env (no secrets) here for ssh sessions "
            "(default: $TCL_RUNNER_SSH_ENV_FILE)",
        )
        sp.add_argument(
            "--code-cache",
            type=Path,
            default=_env_path("TCL_RUNNER_CODE_CACHE"),
            help="extracted code trees shared by this host's runners "
            "(default: $TCL_RUNNER_CODE_CACHE; none: extract each upload)",
        )
        sp.add_argument(
            "--env-dir",
            type=Path,
            default=_env_path("TCL_RUNNER_ENV_DIR"),
            help="where this host keeps the jobs' uv project environments, shared by its "
            "runners (default: $TCL_RUNNER_ENV_DIR, else <code-cache>/envs, else the state dir)",
        )
        sp.add_argument(
            "--compile-cache-dir",
            type=Path,
            default=_env_path("TCL_RUNNER_COMPILE_CACHE_DIR"),
            help="JAX's persistent compilation cache of the jobs, shared by this host's (or "
            "cluster's) runners so a resumed attempt does not recompile (default: "
            "$TCL_RUNNER_COMPILE_CACHE_DIR, else <code-cache>/jax, else none)",
        )
        sp.add_argument(
            "--premounted-code",
            metavar="SHA256",
            default=os.environ.get("TCL_RUNNER_PREMOUNTED_CODE") or None,
            help="the default working dir already holds this cached tree (an overlay mounted by "
            "the executor; default: $TCL_RUNNER_PREMOUNTED_CODE)",
        )
        sp.add_argument(
            "--stop-grace-s",
            type=_grace,
            # A string default goes through ``type`` too: a bad variable is a usage error.
            default=os.environ.get("TCL_RUNNER_STOP_GRACE_S") or str(DEFAULT_GRACE_S),
            help="on SIGTERM/SIGINT/SIGUSR1/SIGUSR2 (forwarded to the job) and at the job's "
            "max_duration_s: how long the job may take to exit before SIGKILL "
            f"(default: $TCL_RUNNER_STOP_GRACE_S or {DEFAULT_GRACE_S:g})",
        )

    s = sub.add_parser("serve", help="serve the HTTP/WebSocket API and run one job")
    s.add_argument(
        "--token-file",
        type=Path,
        default=_env_path("TCL_RUNNER_TOKEN_FILE"),
        help="file holding the bearer token every route but the healthcheck requires "
        "(mode 0600; default: $TCL_RUNNER_TOKEN_FILE). Required: the runner listens where "
        "other users of the host can reach it",
    )
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="0: any free port (see --port-file)"
    )
    s.add_argument("--port-file", type=Path, default=None, help="write the bound port here")
    s.add_argument(
        "--start-timeout-s",
        type=float,
        default=float(os.environ.get("TCL_RUNNER_START_TIMEOUT_S") or DEFAULT_START_TIMEOUT_S),
        help="end the run (terminated) when no job has started this long after the runner "
        "did: the submit that started it is gone, and its task must not hold accelerators "
        f"(default: $TCL_RUNNER_START_TIMEOUT_S or {DEFAULT_START_TIMEOUT_S:g})",
    )
    s.add_argument(
        "--linger-s",
        type=float,
        default=None,
        help="exit this long after the job ended, with its exit code (default: serve on)",
    )
    common(s)

    b = sub.add_parser("batch", help="run a job from files, without being driven over HTTP")
    b.add_argument("--spec", type=Path, required=True, help="JobSpec JSON file")
    b.add_argument(
        "--code", type=Path, default=None, help="code tar.gz (sha256 = spec.code.sha256)"
    )
    b.add_argument(
        "--serve", metavar="HOST:PORT", default=None, help="also serve the API for live logs"
    )
    b.add_argument(
        "--linger-s", type=float, default=0.0, help="with --serve: keep serving after the end"
    )
    b.add_argument(
        "--echo-events",
        action="store_true",
        help="also write each event to stdout (a line: TCL_EVENT and its JSON), for a cluster "
        "that keeps a container's output after the runner is gone (a Kubernetes pod's log)",
    )
    common(b)

    sub.add_parser("openapi", help="print the OpenAPI spec (JSON)")
    f = sub.add_parser(
        "forkserver",
        help="import everything once, then fork a runner for each JSON request on stdin "
        "(the shim's process executor: tcl.runner.forkserver)",
    )
    f.add_argument("--tcl-instance", default="", help="marks the process for its shim")
    return p


def _compile_cache_dir(given: Path | None, code_cache: Path | None) -> Path | None:
    """JAX's cache: as given; else beside the code trees (the code's garbage collector leaves
    it to the shim's bound), on the host and mounted into a docker executor's containers."""
    if given is not None:
        return given.resolve()
    return code_cache / COMPILE_CACHE if code_cache is not None else None


def _config(args: argparse.Namespace) -> RunnerConfig:
    from tcl.runner.reaper import become_subreaper
    from tcl.runner.service import RunnerConfig

    extra = {"max_code_bytes": args.max_code_bytes} if args.max_code_bytes else {}
    cache = args.code_cache.resolve() if args.code_cache else None
    return RunnerConfig(
        state_dir=args.state_dir.resolve(),
        ssh_env_file=args.ssh_env_file,
        code_cache_dir=cache,
        compile_cache_dir=_compile_cache_dir(args.compile_cache_dir, cache),
        # the jobs' project environments, shared by the host's runners like the code trees
        project_env_dir=(
            args.env_dir.resolve() if args.env_dir else cache / PROJECT_ENVS if cache else None
        ),
        premounted_code=args.premounted_code,
        end_orphans=become_subreaper(),
        stop_grace_s=args.stop_grace_s,
        echo_events_fd=sys.stdout.fileno() if getattr(args, "echo_events", False) else None,
        **extra,
    )


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.command == "forkserver":
        from tcl.runner.forkserver import serve_forks

        serve_forks()
        return
    if args.command == "openapi":
        import json

        from tcl.runner.openapi import openapi

        print(json.dumps(openapi(), indent=2))
        return
    from tcl.runner.errors import RunnerError
    from tcl.tokenfile import TokenFileError

    try:
        sys.exit(_serve(args) if args.command == "serve" else _batch(args))
    except (RunnerError, TokenFileError, ValueError, OSError) as e:
        print(f"tcl-runner: {getattr(e, 'detail', e)}", file=sys.stderr)
        sys.exit(2)


def _serve(args: argparse.Namespace) -> int:
    from tcl.runner.server import serve
    from tcl.runner.service import Runner

    token = _token(args.token_file)
    runner = Runner(_config(args))
    try:
        return serve(
            runner,
            args.host,
            args.port,
            token,
            args.port_file,
            args.linger_s,
            args.start_timeout_s,
        )
    finally:
        runner.close()


def _token(path: Path | None) -> str:
    from tcl.tokenfile import read_token

    if path is None:
        raise ValueError(
            "serve needs --token-file (or $TCL_RUNNER_TOKEN_FILE): a 0600 file "
            "holding the bearer token"
        )
    # Not owner-checked: in a container the file is bind-mounted from the shim's user.
    return read_token(path, "--token-file", check_owner=False)


def _batch(args: argparse.Namespace) -> int:
    from tcl.runner.batch import run_batch
    from tcl.runner.server import parse_addr

    addr = parse_addr(args.serve) if args.serve else None
    return run_batch(_config(args), args.spec, args.code, addr, args.linger_s)


if __name__ == "__main__":
    main()
