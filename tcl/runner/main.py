"""``tcl-runner``: parse flags, call the library. Nothing heavy is imported before it is needed
(no JAX, asyncssh or docker on this path: start-up time is part of submit latency)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

DEFAULT_PORT = 10999


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
            default=Path(os.environ["TCL_RUNNER_SSH_ENV_FILE"])
            if os.environ.get("TCL_RUNNER_SSH_ENV_FILE")
            else None,
            help="write the job's working dir and env (no secrets) here for ssh sessions "
            "(default: $TCL_RUNNER_SSH_ENV_FILE)",
        )

    s = sub.add_parser("serve", help="serve the HTTP/WebSocket API and run one job")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="0: any free port (see --port-file)"
    )
    s.add_argument("--port-file", type=Path, default=None, help="write the bound port here")
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
    common(b)

    sub.add_parser("openapi", help="print the OpenAPI spec (JSON)")
    return p


def _config(args: argparse.Namespace) -> object:
    from tcl.runner.service import RunnerConfig

    extra = {"max_code_bytes": args.max_code_bytes} if args.max_code_bytes else {}
    return RunnerConfig(state_dir=args.state_dir.resolve(), ssh_env_file=args.ssh_env_file, **extra)


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.command == "openapi":
        import json

        from tcl.runner.openapi import openapi

        print(json.dumps(openapi(), indent=2))
        return
    from tcl.runner.errors import RunnerError
    from tcl.runner.service import RunnerConfig

    config = _config(args)
    assert isinstance(config, RunnerConfig)
    try:
        if args.command == "serve":
            _serve(config, args.host, args.port, args.port_file)
        else:
            from tcl.runner.batch import run_batch
            from tcl.runner.server import parse_addr

            serve = parse_addr(args.serve) if args.serve else None
            sys.exit(run_batch(config, args.spec, args.code, serve, args.linger_s))
    except (RunnerError, ValueError, OSError) as e:
        print(f"tcl-runner: {getattr(e, 'detail', e)}", file=sys.stderr)
        sys.exit(2)


def _serve(config: object, host: str, port: int, port_file: Path | None) -> None:
    import asyncio
    import signal

    from tcl.runner.server import Server
    from tcl.runner.service import Runner, RunnerConfig

    assert isinstance(config, RunnerConfig)
    runner = Runner(config)
    server = Server(runner, host, port, port_file)

    async def go() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _on_signal, runner, server)
        await server.serve()

    try:
        asyncio.run(go())
    finally:
        runner.close()


def _on_signal(runner: object, server: object) -> None:
    """The container is being stopped: stop the job (short grace), then the server."""
    import threading

    from tcl.runner.server import Server
    from tcl.runner.service import Runner

    assert isinstance(runner, Runner) and isinstance(server, Server)

    def finish() -> None:
        runner.stop(grace_s=5.0)
        runner.wait(10.0)
        server.shutdown()

    threading.Thread(target=finish, daemon=True).start()


if __name__ == "__main__":
    main()
