"""``TpuEmulator``: the emulator served by uvicorn on 127.0.0.1 in a thread of its own.

The server has its own event loop in its own thread, so a test may drive it with the
synchronous ``google.cloud.tpu_v2.TpuClient`` (or from its own loop) without deadlock. The
helper methods talk to the admin routes over HTTP, never to the state directly.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import uvicorn

from tests.tpuemu.app import Emulator, build_app
from tests.tpuemu.config import DEFAULT_ZONES, EmulatorConfig
from tests.tpuemu.workers import SshAccess, WorkerHost


class TpuEmulator:
    """A running Cloud TPU API v2 emulator; use as a context manager.

    ``workers``: the pool (testbed hosts); ``ssh_config``: an ssh_config that reaches them as
    root (None: no startup/shutdown scripts). Other arguments: see ``EmulatorConfig``.
    """

    def __init__(
        self,
        workers: Sequence[WorkerHost] = (),
        ssh_config: Path | None = None,
        *,
        zones: Sequence[str] = DEFAULT_ZONES,
        log_dir: Path | None = None,
        create_delay_s: float = 0.5,
        delete_delay_s: float = 0.2,
        queue_poll_s: float = 0.2,
        require_auth: bool = False,
        queued_accepted: bool = False,
        port: int = 0,
    ) -> None:
        # Without a log_dir, the logs go to a temporary folder removed by stop().
        self._tmp_logs = log_dir is None
        logs = log_dir if log_dir is not None else Path(tempfile.mkdtemp(prefix="tpuemu-"))
        self.config = EmulatorConfig(
            zones=tuple(zones),
            workers=tuple(workers),
            ssh=None if ssh_config is None else SshAccess(ssh_config),
            create_delay_s=create_delay_s,
            delete_delay_s=delete_delay_s,
            queue_poll_s=queue_poll_s,
            require_auth=require_auth,
            queued_accepted=queued_accepted,
            log_dir=logs,
        )
        self.emulator = Emulator(self.config)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port: int = self._sock.getsockname()[1]
        self._server = uvicorn.Server(
            uvicorn.Config(build_app(self.emulator), log_level="warning", lifespan="off")
        )
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The ``api_endpoint`` for the client: ``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.config.log_dir

    def start(self) -> TpuEmulator:
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the TPU emulator did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._sock.close()
        if self._tmp_logs:
            shutil.rmtree(self.config.log_dir, ignore_errors=True)

    def __enter__(self) -> TpuEmulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- test helpers (over the admin routes) --------------------------------------------

    def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        with httpx.Client(base_url=self.url, timeout=120) as client:
            resp = client.request(method, path, **kw)
        resp.raise_for_status()
        return resp

    def preempt(
        self, project: str, zone: str, node_id: str, grace_s: float = 10.0
    ) -> dict[str, Any]:
        """Preempt a READY node: its shutdown-script runs (≤ ``grace_s``), then its workers'
        processes are killed and it turns PREEMPTED. Returns ``{node, shutdownExit}``."""
        path = f"/emulator/nodes/{project}/{zone}/{node_id}:preempt"
        out: dict[str, Any] = self._call("POST", path, json={"grace_s": grace_s}).json()
        return out

    def requests(self) -> list[dict[str, Any]]:
        """Every request received so far: ``{method, path, query, body}``."""
        out: list[dict[str, Any]] = self._call("GET", "/emulator/requests").json()
        return out

    def clear_requests(self) -> None:
        self._call("DELETE", "/emulator/requests")

    def node_info(self, node_id: str) -> dict[str, Any]:
        """``{node, workers: [{ip, netns, startupExit, startupLog, shutdownLog}]}``."""
        out: dict[str, Any] = self._call("GET", f"/emulator/nodes/{node_id}").json()
        return out

    def startup_log(self, node_id: str, worker: int = 0) -> str:
        """The startup script's output on ``worker`` so far (all boots, each with a header)."""
        return self._call(
            "GET", f"/emulator/nodes/{node_id}/startup-log", params={"worker": worker}
        ).text

    def wait_startup(self, node_id: str, timeout_s: float = 60.0) -> list[int]:
        """Block until the startup script has exited on every worker; their exit codes."""
        deadline = time.monotonic() + timeout_s
        while True:
            codes = [w["startupExit"] for w in self.node_info(node_id)["workers"]]
            if codes and all(c is not None for c in codes):
                return [int(c) for c in codes]
            if time.monotonic() > deadline:
                raise TimeoutError(f"startup scripts of {node_id} still running: {codes}")
            time.sleep(0.1)
