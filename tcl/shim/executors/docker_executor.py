"""The docker executor: one labelled container per task, through the docker SDK.

Containers are named ``tcl-<instance>-<task id>`` and labelled with the task id and the shim
instance (a random id kept in the state dir), so two shims on one dockerd never touch each
other's containers. GPU device requests are only made where the NVIDIA runtime exists.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests.exceptions
from docker.types import DeviceRequest, DriverConfig, Mount

from tcl.shim.api import ExecutorKind, NetworkMode, Ports
from tcl.shim.errors import ContainerError, ExecutorUnavailable, ImageError
from tcl.shim.executors.base import (
    Launch,
    Liveness,
    Observed,
    ProgressFn,
    Started,
    accelerator_env,
)
from tcl.shim.executors.ports import free_port
from tcl.shim.executors.pull import pull_image
from tcl.shim.inventory import tpu_device_paths
from tcl.shim.store import Handle

log = logging.getLogger(__name__)

LABEL_TASK = "tcl.shim.task-id"
LABEL_INSTANCE = "tcl.shim.instance"
RUNNER_PORT = 10999
SSH_PORT = 10022
RUNNER_STATE_DIR = "/var/lib/tcl-runner"
CODE_CACHE_TARGET = "/var/cache/tcl-code"  # the host's code cache, shared by its runners
RUNNER_WORKDIR = f"{RUNNER_STATE_DIR}/work"  # the runner's default working dir
RUNNER_TOKEN_TARGET = "/run/tcl-runner-token"  # the task's token file, bind-mounted read-only
_ALIVE = {"created", "running", "restarting", "paused"}


class DockerExecutor:
    kind = ExecutorKind.DOCKER

    def __init__(
        self,
        client: Any,
        pull_api: Any,
        instance_id: str,
        pull_stall_timeout_s: float,
        dev_dir: Path = Path("/dev"),
        code_cache: Path | None = None,
    ) -> None:
        self._client = client
        self._code_cache = code_cache
        self._pull_api = pull_api
        self._instance = instance_id
        self._stall_s = pull_stall_timeout_s
        self._dev_dir = dev_dir
        try:
            runtimes = client.info().get("Runtimes") or {}
        except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
            raise ExecutorUnavailable(f"docker: cannot query the daemon: {e}") from e
        self.nvidia_runtime = "nvidia" in runtimes

    @classmethod
    def connect(
        cls,
        instance_id: str,
        pull_stall_timeout_s: float,
        code_cache: Path | None = None,
        dev_dir: Path = Path("/dev"),
    ) -> DockerExecutor:
        """Connect to the local dockerd (DOCKER_HOST etc.); ExecutorUnavailable if absent."""
        try:
            client = docker.from_env(timeout=60)
            client.ping()
            pull_client = docker.from_env(timeout=max(1, math.ceil(pull_stall_timeout_s)))
        except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
            raise ExecutorUnavailable(f"docker is not available: {e}") from e
        return cls(
            client,
            pull_client.api,
            instance_id,
            pull_stall_timeout_s,
            dev_dir=dev_dir,
            code_cache=code_cache,
        )

    def container_name(self, task_id: str) -> str:
        return f"tcl-{self._instance}-{task_id}"

    # -- prepare ------------------------------------------------------------------------------
    async def prepare(self, launch: Launch, progress: ProgressFn) -> None:
        image = launch.spec.image
        if await asyncio.to_thread(self._has_image, image):
            return
        progress(0.0)
        auth = launch.spec.registry_auth
        auth_config = {"username": auth.username, "password": auth.password} if auth else None
        cancel = threading.Event()
        try:
            await asyncio.to_thread(
                pull_image, self._pull_api, image, auth_config, self._stall_s, progress, cancel
            )
        finally:
            cancel.set()
        if not await asyncio.to_thread(self._has_image, image):
            raise ImageError(f"image {image} is still missing after the pull")

    def _has_image(self, image: str) -> bool:
        try:
            self._client.images.get(image)
            return True
        except docker.errors.ImageNotFound:
            return False
        except docker.errors.APIError as e:
            raise ImageError(f"image {image}: {e.explanation or e}") from e

    # -- start --------------------------------------------------------------------------------
    async def start(self, launch: Launch) -> Started:
        return await asyncio.to_thread(self._start, launch)

    def _start(self, launch: Launch) -> Started:
        spec = launch.spec
        gpus = self.nvidia_runtime and launch.host_vendor == "nvidia"
        env = {
            **spec.env,
            **accelerator_env(launch, renumbered=gpus),
            "TCL_TASK_ID": spec.id,
            "TCL_RUNNER_TOKEN_FILE": RUNNER_TOKEN_TARGET,
        }
        if spec.ssh_keys:
            env["TCL_SSH_AUTHORIZED_KEYS"] = "\n".join(spec.ssh_keys)
        kwargs: dict[str, Any] = {
            "name": self.container_name(spec.id),
            "labels": {LABEL_TASK: spec.id, LABEL_INSTANCE: self._instance},
            "detach": True,
            "mounts": [
                Mount(target=m.target, source=m.source, type="bind", read_only=m.read_only)
                for m in spec.mounts
            ]
            + [
                Mount(
                    target=RUNNER_TOKEN_TARGET,
                    source=str(launch.runner_token_file.resolve()),
                    type="bind",
                    read_only=True,
                )
            ],
        }
        overlay: Mount | None = None
        if self._code_cache is not None:
            self._code_cache.mkdir(parents=True, exist_ok=True, mode=0o700)
            kwargs["mounts"].append(
                Mount(target=CODE_CACHE_TARGET, source=str(self._code_cache), type="bind")
            )
            env["TCL_RUNNER_CODE_CACHE"] = CODE_CACHE_TARGET
            overlay = self._code_overlay(launch)
        if spec.shm_bytes:
            kwargs["shm_size"] = spec.shm_bytes
        if spec.cpus:
            kwargs["nano_cpus"] = int(spec.cpus * 1e9)
        if spec.memory_bytes:
            kwargs["mem_limit"] = spec.memory_bytes
        indices = [str(a.index) for a in launch.accelerators]
        if gpus and indices:
            kwargs["device_requests"] = [DeviceRequest(device_ids=indices, capabilities=[["gpu"]])]
        elif launch.host_vendor == "tpu" and indices:
            # Only this task's chips: libtpu opens every chip node it can see.
            paths = tpu_device_paths(self._dev_dir, [a.index for a in launch.accelerators])
            kwargs["devices"] = [f"{p}:{p}:rwm" for p in paths]
        ports = Ports()
        if launch.network is NetworkMode.HOST:
            ports = Ports(runner=free_port(), ssh=free_port())
            env["TCL_SSH_PORT"] = str(ports.ssh)
            env["TCL_SSH_LISTEN"] = "127.0.0.1"  # host network: loopback only, like the agents
            kwargs["network_mode"] = "host"
            kwargs["command"] = [
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(ports.runner),
                "--state-dir",
                RUNNER_STATE_DIR,
            ]
        else:
            kwargs["ports"] = {
                f"{RUNNER_PORT}/tcp": ("127.0.0.1", None),
                f"{SSH_PORT}/tcp": ("127.0.0.1", None),
            }
        kwargs["environment"] = env
        if overlay is not None:
            try:
                container = self._create_and_start(
                    spec.image,
                    {
                        **kwargs,
                        "mounts": [*kwargs["mounts"], overlay],
                        "environment": {**env, "TCL_RUNNER_PREMOUNTED_CODE": spec.code_sha256},
                    },
                )
            except ContainerError as e:  # no overlay mounts here: the runner copies the tree
                log.warning("code overlay refused, copying instead: %s", e.detail)
                container = self._create_and_start(spec.image, kwargs)
        else:
            container = self._create_and_start(spec.image, kwargs)
        if launch.network is not NetworkMode.HOST:
            ports = _published(container.attrs)
        return Started(handle=Handle(container_id=container.id), ports=ports)

    def _code_overlay(self, launch: Launch) -> Mount | None:
        """An overlay of the cached tree (read-only lower) and a per-task upper dir, mounted by
        dockerd as the runner's working dir: the job's writes never reach the cache."""
        sha = launch.spec.code_sha256
        if sha is None or self._code_cache is None:
            return None
        tree = self._code_cache.resolve() / "trees" / sha
        task_dir = launch.task_dir.resolve()
        upper, work = task_dir / "code-upper", task_dir / "code-work"
        if not tree.is_dir() or any(c in str(p) for p in (tree, upper, work) for c in ",:"):
            return None
        upper.mkdir(exist_ok=True)
        work.mkdir(exist_ok=True)
        options = {
            "type": "overlay",
            "device": "overlay",
            "o": f"lowerdir={tree},upperdir={upper},workdir={work}",
        }
        return Mount(
            target=RUNNER_WORKDIR,
            source=None,
            type="volume",
            driver_config=DriverConfig("local", options),
        )

    def _create_and_start(self, image: str, kwargs: dict[str, Any]) -> Any:
        try:
            container = self._client.containers.create(image, **kwargs)
        except docker.errors.ImageNotFound as e:
            raise ImageError(f"image {image}: {e.explanation or e}") from e
        except docker.errors.APIError as e:
            raise ContainerError(f"cannot create the container: {e.explanation or e}") from e
        try:
            container.start()
            container.reload()
        except docker.errors.APIError as e:
            self._remove_quietly(container.id)
            raise ContainerError(f"cannot start the container: {e.explanation or e}") from e
        return container

    # -- observe ------------------------------------------------------------------------------
    async def observe(self, tasks: dict[str, Handle]) -> dict[str, Observed]:
        if not tasks:
            return {}
        return await asyncio.to_thread(self._observe, tasks)

    def _list_mine(self) -> list[dict[str, Any]]:
        try:
            found: list[dict[str, Any]] = self._client.api.containers(
                all=True, filters={"label": f"{LABEL_INSTANCE}={self._instance}"}
            )
            return found
        except (docker.errors.APIError, requests.exceptions.RequestException) as e:
            raise ContainerError(f"docker: cannot list containers: {e}") from e

    def _observe(self, tasks: dict[str, Handle]) -> dict[str, Observed]:
        by_task = {c["Labels"].get(LABEL_TASK): c for c in self._list_mine()}
        out: dict[str, Observed] = {}
        for task_id in tasks:
            summary = by_task.get(task_id)
            if summary is None:
                out[task_id] = Observed(Liveness.MISSING, message="the container is gone")
                continue
            handle = Handle(container_id=summary["Id"])
            if summary.get("State") in _ALIVE:
                ports = _summary_ports(summary)
                out[task_id] = Observed(Liveness.ALIVE, ports=ports, handle=handle)
                continue
            try:
                attrs = self._client.api.inspect_container(summary["Id"])
            except docker.errors.NotFound:
                out[task_id] = Observed(Liveness.MISSING, message="the container is gone")
                continue
            state = attrs.get("State", {})
            message = state.get("Error") or ""
            if state.get("OOMKilled"):
                message = "the container ran out of memory (OOM killed)"
            out[task_id] = Observed(
                Liveness.EXITED, exit_code=state.get("ExitCode"), message=message, handle=handle
            )
        return out

    # -- stop / remove ------------------------------------------------------------------------
    async def stop(self, task_id: str, handle: Handle, timeout_s: float) -> int | None:
        return await asyncio.to_thread(self._stop, task_id, timeout_s)

    def _stop(self, task_id: str, timeout_s: float) -> int | None:
        try:
            container = self._client.containers.get(self.container_name(task_id))
            if container.status in _ALIVE:
                container.stop(timeout=math.ceil(timeout_s))
                container.reload()
            code: int | None = container.attrs.get("State", {}).get("ExitCode")
            return code
        except docker.errors.NotFound:
            return None
        except docker.errors.APIError as e:
            raise ContainerError(f"cannot stop the container: {e.explanation or e}") from e

    async def remove(self, task_id: str, handle: Handle) -> None:
        await asyncio.to_thread(self._remove_quietly, self.container_name(task_id))

    def _remove_quietly(self, name_or_id: str) -> None:
        try:
            self._client.api.remove_container(name_or_id, force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as e:
            if e.status_code != 409:  # "removal already in progress"
                raise ContainerError(f"cannot remove container: {e.explanation or e}") from e

    async def orphans(self, known: Iterable[str]) -> list[str]:
        known_ids = set(known)
        found = await asyncio.to_thread(self._list_mine)
        return [c["Id"] for c in found if c["Labels"].get(LABEL_TASK) not in known_ids]

    async def end_job_leftovers(self, task_id: str, handle: Handle) -> int:
        """Nothing to do here: the runner is the container's PID 1, so whatever the job left
        running is reparented to it, and it ends those itself when the job exits."""
        return 0

    async def open(self) -> None:
        """No warm containers: a container's devices, mounts and network are fixed when it is
        created, and those are the task's."""

    async def close(self) -> None:
        pass

    async def remove_orphan(self, name: str) -> None:
        log.info("removing orphan container %s", name[:12])
        await asyncio.to_thread(self._remove_quietly, name)


def _published(attrs: dict[str, Any]) -> Ports:
    published = (attrs.get("NetworkSettings") or {}).get("Ports") or {}

    def host_port(key: str) -> int | None:
        for binding in published.get(key) or []:
            if binding.get("HostIp") in ("127.0.0.1", "", None) and binding.get("HostPort"):
                return int(binding["HostPort"])
        return None

    return Ports(runner=host_port(f"{RUNNER_PORT}/tcp"), ssh=host_port(f"{SSH_PORT}/tcp"))


def _summary_ports(summary: dict[str, Any]) -> Ports:
    runner = ssh = None
    for p in summary.get("Ports") or []:
        if p.get("PublicPort") and p.get("IP") in ("127.0.0.1", None, ""):
            if p.get("PrivatePort") == RUNNER_PORT:
                runner = int(p["PublicPort"])
            elif p.get("PrivatePort") == SSH_PORT:
                ssh = int(p["PublicPort"])
    return Ports(runner=runner, ssh=ssh)
