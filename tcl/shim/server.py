"""Build and run a shim from its settings (the command line only parses flags into these)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import secrets
import shutil
import stat
import string
import sys
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from tcl.atomic import write_atomic
from tcl.shim.api import ExecutorKind
from tcl.shim.app import create_app
from tcl.shim.errors import BadRequest, ExecutorUnavailable
from tcl.shim.executors.base import Executor
from tcl.shim.executors.process_executor import ProcessExecutor
from tcl.shim.inventory import discover
from tcl.shim.reconcile import Reconciler, ensure_instance_id
from tcl.shim.service import TaskService
from tcl.shim.store import TaskStore

log = logging.getLogger(__name__)
CODE_CACHE_DIR = "code-cache"  # extracted code trees shared by the runners (tcl.runner.codecache)


@dataclass(frozen=True)
class ShimSettings:
    state_dir: Path
    token_file: Path
    host: str = "127.0.0.1"
    port: int = 10998
    executor: ExecutorKind | None = None  # None: docker where it works, else process
    fake_accelerators: str | None = None
    runner_bin: str | None = None
    reconcile_interval_s: float = 1.0
    pull_stall_timeout_s: float = 60.0
    finished_retention_s: float = 600.0
    runner_silence_limit_s: float = 30.0
    record_retention_s: float = 7 * 24 * 3600.0


class SettingsError(Exception):
    """A setting cannot be used; the message names the flag."""


def check_loopback(host: str) -> None:
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise SettingsError(f"--host {host}: the shim listens on loopback only (reach it through SSH)")


TOKEN_MIN_BITS = 256
_TOKEN_MAX_BYTES = 4096
_HEX = frozenset(string.hexdigits)
_BASE64URL = frozenset(string.ascii_letters + string.digits + "-_")
_NEW_TOKEN = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


def token_bits(token: str) -> float:
    """A rough upper bound on a token's entropy, from its alphabet and length."""
    chars = set(token)
    per_char = 4.0 if chars <= _HEX else 6.0 if chars <= _BASE64URL else 6.5
    return per_char * len(token)


def load_token(path: Path) -> str:
    """Read the bearer token, refusing a file another local user could read or replace.

    Refused, with one line naming ``--token-file``: a directory or other non-file, a file not
    owned by the shim's user or open to its group or others, one in a world-writable directory
    (sticky or not: whoever can write there can swap the file between our checks and our read,
    or before the next restart), and a token under 256 bits. A missing file is created: a random
    token, mode 0600, in a directory made 0700 if it does not exist."""
    flag = f"--token-file {path}"
    for parent in dict.fromkeys([path.parent, path.resolve().parent]):
        try:
            mode = os.stat(parent).st_mode
        except FileNotFoundError:
            continue
        if mode & stat.S_IWOTH:
            raise SettingsError(
                f"{flag}: its directory {parent} is world-writable (mode "
                f"{stat.S_IMODE(mode):04o}), so another user could replace the token; keep it in "
                f"a directory only the shim's user can write (mkdir -m 700 DIR)"
            )
    try:
        # O_NONBLOCK: a FIFO planted at the path must not hang the shim (it is refused below).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, (secrets.token_urlsafe(32) + "\n").encode(), mode=0o600)
        log.info("created a new token file %s", path)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise SettingsError(f"{flag}: cannot open it: {e.strerror}") from None
    try:
        # Checked on the open file, not the path, so nothing can be swapped in between.
        st = os.fstat(fd)
        _check_token_file(flag, path, st)
        raw = os.read(fd, _TOKEN_MAX_BYTES + 1)
    except OSError as e:
        raise SettingsError(f"{flag}: cannot read it: {e.strerror}") from None
    finally:
        os.close(fd)
    return _check_token(flag, path, raw)


def _check_token_file(flag: str, path: Path, st: os.stat_result) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise SettingsError(f"{flag}: is a directory; give the path of a token file inside it")
    if not stat.S_ISREG(st.st_mode):
        raise SettingsError(f"{flag}: not a regular file; give the path of a token file")
    uid = os.geteuid()
    if st.st_uid != uid:
        raise SettingsError(
            f"{flag}: owned by uid {st.st_uid}, who could change it, not by the shim's user "
            f"(uid {uid}); run chown {uid} {path} (and chmod 600 {path})"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise SettingsError(f"{flag}: mode {mode:04o} lets other users at it; run chmod 600 {path}")


def _fix(path: Path) -> str:
    return f"write a new one, (umask 077; {_NEW_TOKEN} > {path}), or delete it for the shim to make"


def _check_token(flag: str, path: Path, raw: bytes) -> str:
    if len(raw) > _TOKEN_MAX_BYTES:
        raise SettingsError(f"{flag}: over {_TOKEN_MAX_BYTES} bytes: not a token file")
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        token = "\x00"  # refused just below, with the same hint
    if not token:
        raise SettingsError(f"{flag}: the file is empty; {_fix(path)}")
    if not all("!" <= c <= "~" for c in token):
        raise SettingsError(
            f"{flag}: the token has characters an HTTP header cannot carry (spaces, control or "
            f"non-ASCII); {_fix(path)}"
        )
    bits = token_bits(token)
    if bits < TOKEN_MIN_BITS:
        raise SettingsError(
            f"{flag}: the token is too short ({len(token)} characters, about {bits:.0f} bits; "
            f"{TOKEN_MIN_BITS} needed); {_fix(path)}"
        )
    return token


def default_runner_argv(runner_bin: str | None) -> list[str]:
    if runner_bin:
        return [runner_bin]
    beside = Path(sys.executable).with_name("tcl-runner")
    found = str(beside) if beside.exists() else shutil.which("tcl-runner")
    return [found] if found else [sys.executable, "-m", "tcl.runner.main"]


def build(settings: ShimSettings) -> tuple[TaskService, Reconciler]:
    state_dir = settings.state_dir
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    instance = ensure_instance_id(state_dir)
    store = TaskStore(state_dir)
    try:
        inventory = discover(settings.fake_accelerators)
    except BadRequest as e:
        raise SettingsError(e.detail) from e
    code_cache = state_dir.resolve() / CODE_CACHE_DIR
    executors: dict[ExecutorKind, Executor] = {
        ExecutorKind.PROCESS: ProcessExecutor(
            default_runner_argv(settings.runner_bin),
            instance,
            store.tasks_dir,
            code_cache=code_cache,
        ),
    }
    try:
        from tcl.shim.executors.docker_executor import DockerExecutor

        executors[ExecutorKind.DOCKER] = DockerExecutor.connect(
            instance, settings.pull_stall_timeout_s, code_cache=code_cache
        )
    except ExecutorUnavailable as e:
        if settings.executor is ExecutorKind.DOCKER:
            raise SettingsError(f"--executor docker: {e.detail}") from e
        log.info("docker executor unavailable: %s", e.detail)
    default = settings.executor or (
        ExecutorKind.DOCKER if ExecutorKind.DOCKER in executors else ExecutorKind.PROCESS
    )
    service = TaskService(
        store=store, inventory=inventory, executors=executors, default_executor=default
    )
    return service, Reconciler(
        service,
        settings.reconcile_interval_s,
        retention_s=settings.finished_retention_s,
        silence_limit_s=settings.runner_silence_limit_s,
        record_retention_s=settings.record_retention_s,
    )


def make_app(settings: ShimSettings) -> FastAPI:
    check_loopback(settings.host)
    token = load_token(settings.token_file)
    service, reconciler = build(settings)

    async def shutdown() -> None:
        await reconciler.close()
        await service.close()

    return create_app(service, token, on_startup=reconciler.start, on_shutdown=shutdown)


def serve(settings: ShimSettings, log_level: str = "info") -> None:
    app = make_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        access_log=False,
        lifespan="on",
    )
    os.umask(0o077)
    asyncio.run(uvicorn.Server(config).serve())
