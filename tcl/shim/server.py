"""Build and run a shim from its settings (the command line only parses flags into these)."""

from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import logging
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from tcl.common.codecachelayout import COMPILE_CACHE, PROJECT_ENVS
from tcl.localsock import listen_unix
from tcl.shim.api import ExecutorKind
from tcl.shim.app import create_app
from tcl.shim.clusterfs import ClusterMounts
from tcl.shim.codegc import DEFAULT_MAX_BYTES as DEFAULT_CODE_CACHE_MAX_BYTES
from tcl.shim.codegc import CodeGc
from tcl.shim.derivedgc import DEFAULT_ENV_MAX_IDLE_S, DEFAULT_JAX_MAX_BYTES, DerivedGc
from tcl.shim.errors import BadRequest, ExecutorUnavailable
from tcl.shim.executors.base import Executor
from tcl.shim.executors.forkclient import RunnerForkServer
from tcl.shim.executors.process_executor import ProcessExecutor
from tcl.shim.inventory import discover
from tcl.shim.reconcile import Reconciler, ensure_instance_id
from tcl.shim.service import TaskService
from tcl.shim.store import TaskStore
from tcl.tokenfile import TokenFileError, read_token

log = logging.getLogger(__name__)
CODE_CACHE_DIR = "code-cache"  # extracted code trees shared by the runners (tcl.runner.codecache)
FORKSERVER_LOG = "runner-forkserver.log"  # what the fork server says (its errors)
LOCK_FILE = "lock"  # held by the one shim that owns the state dir, for its whole life


@dataclass(frozen=True)
class ShimSettings:
    state_dir: Path
    token_file: Path
    host: str = "127.0.0.1"
    port: int = 10998
    uds: Path | None = None  # a Unix socket instead of host:port (tcl.localsock)
    new_token: bool = False  # write a fresh token to token_file at start (tcl host setup's shims)
    executor: ExecutorKind | None = None  # None: docker where it works, else process
    fake_accelerators: str | None = None
    tpu_chip: str | None = None  # what TPU chips are called (/dev does not say); e.g. tpu-v4
    dev_dir: Path = Path("/dev")  # where accelerator device nodes are found (tests: a tmp dir)
    runner_bin: str | None = None
    reconcile_interval_s: float = 1.0
    pull_stall_timeout_s: float = 60.0
    finished_retention_s: float = 600.0
    runner_silence_limit_s: float = 30.0
    record_retention_s: float = 7 * 24 * 3600.0
    code_cache_max_bytes: int = DEFAULT_CODE_CACHE_MAX_BYTES  # extracted trees + tarballs
    jax_cache_max_bytes: int = DEFAULT_JAX_MAX_BYTES  # <code-cache>/jax
    env_max_idle_s: float = DEFAULT_ENV_MAX_IDLE_S  # <code-cache>/envs, unused this long: removed
    code_tarballs: Path | None = None  # the ssh backend's <shim_dir>/code (tcl host setup)
    cluster_fs: bool = True  # False: tasks asking for a cluster filesystem are refused
    runner_forkserver: bool = True  # process executor: fork runners from one started ahead


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


def load_token(path: Path, rotate: bool = False) -> str:
    """The bearer token in ``--token-file`` (``tcl.tokenfile``: refused, one line, when another
    local user could read or replace it, or when it is too short); created if missing, replaced
    by a new one first with ``rotate`` (``--new-token``)."""
    try:
        return read_token(path, "--token-file", create=True, rotate=rotate)
    except TokenFileError as e:
        raise SettingsError(str(e)) from None


def lock_state_dir(state_dir: Path, where: str) -> int:
    """Take the state dir for this process (non-blocking ``flock`` on ``<state-dir>/lock``).

    Two shims on one state dir would each take the other's runners for orphans and kill them,
    so the second one refuses to start. Returns the locked descriptor: keep it open for the
    process's life (the kernel drops the lock when the process dies, however it dies). Python
    opens it non-inheritable, so runners started by the shim never hold the lock.
    """
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 200).decode(errors="replace").strip() or "pid unknown"
        os.close(fd)
        raise SettingsError(
            f"--state-dir {state_dir}: another tcl-shim is using it ({holder})"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"pid {os.getpid()}, {where}\n".encode(), 0)
    return fd


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
        inventory = discover(settings.fake_accelerators, settings.dev_dir, settings.tpu_chip)
    except BadRequest as e:
        raise SettingsError(e.detail) from e
    code_cache = state_dir.resolve() / CODE_CACHE_DIR
    runner_argv = default_runner_argv(settings.runner_bin)
    executors: dict[ExecutorKind, Executor] = {
        ExecutorKind.PROCESS: ProcessExecutor(
            runner_argv,
            instance,
            store.tasks_dir,
            code_cache=code_cache,
            forkserver=RunnerForkServer(runner_argv, instance, state_dir / FORKSERVER_LOG)
            if settings.runner_forkserver
            else None,
        ),
    }
    try:
        from tcl.shim.executors.docker_executor import DockerExecutor

        executors[ExecutorKind.DOCKER] = DockerExecutor.connect(
            instance, settings.pull_stall_timeout_s, code_cache=code_cache, dev_dir=settings.dev_dir
        )
    except ExecutorUnavailable as e:
        if settings.executor is ExecutorKind.DOCKER:
            raise SettingsError(f"--executor docker: {e.detail}") from e
        log.info("docker executor unavailable: %s", e.detail)
    default = settings.executor or (
        ExecutorKind.DOCKER if ExecutorKind.DOCKER in executors else ExecutorKind.PROCESS
    )
    service = TaskService(
        store=store,
        inventory=inventory,
        executors=executors,
        default_executor=default,
        mounts=ClusterMounts(state_dir, enabled=settings.cluster_fs),
    )
    return service, Reconciler(
        service,
        settings.reconcile_interval_s,
        retention_s=settings.finished_retention_s,
        silence_limit_s=settings.runner_silence_limit_s,
        record_retention_s=settings.record_retention_s,
        code_gc=CodeGc(code_cache / "trees", settings.code_tarballs, settings.code_cache_max_bytes),
        # beside the trees: the runners' JAX cache and project environments (tcl.runner.main)
        derived_gc=DerivedGc(
            code_cache / COMPILE_CACHE,
            code_cache / PROJECT_ENVS,
            settings.jax_cache_max_bytes,
            settings.env_max_idle_s,
        ),
    )


def make_app(settings: ShimSettings) -> FastAPI:
    if settings.uds is None:
        check_loopback(settings.host)
    token = load_token(settings.token_file, settings.new_token)
    service, reconciler = build(settings)

    async def shutdown() -> None:
        await reconciler.close()
        await service.close()

    async def startup() -> None:
        service.mounts.start()
        await reconciler.start()
        await service.open()

    return create_app(service, token, on_startup=startup, on_shutdown=shutdown)


def serve(settings: ShimSettings, log_level: str = "info") -> None:
    if settings.uds is None:
        check_loopback(settings.host)
    where = f"socket {settings.uds}" if settings.uds else f"port {settings.port}"
    lock_fd = lock_state_dir(settings.state_dir, where)  # before reconcile adopts
    try:
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
        sockets: list[socket.socket] | None = None
        if settings.uds is not None:
            try:
                sockets = [listen_unix(settings.uds)]
            except OSError as e:
                raise SettingsError(f"--uds {settings.uds}: {e}") from None
        asyncio.run(uvicorn.Server(config).serve(sockets=sockets))
    finally:
        os.close(lock_fd)  # also when a setting is refused: an in-process caller may retry
