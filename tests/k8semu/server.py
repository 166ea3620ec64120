"""``K8sEmulator``: the API server + Volcano emulator, served by uvicorn on 127.0.0.1.

The server runs its own event loop in a thread, and the controller ticks in another, so a
test may drive it with the synchronous ``kubernetes`` client. ``write_kubeconfig`` makes the
file the client loads (``server: http://127.0.0.1:PORT``, a bearer token, a namespace).
Needs root: pods get network, mount and UTS namespaces (see ``tests.k8semu.network``).
"""

from __future__ import annotations

import logging
import shutil
import socket
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import uvicorn
import yaml

from tests.k8semu.app import Api, build_app
from tests.k8semu.cluster import Cluster
from tests.k8semu.config import EmulatorConfig, Network, QueueSpec, Validator, minimal_vcjob_check
from tests.k8semu.network import PodNetwork
from tests.k8semu.volcano import Controller

log = logging.getLogger(__name__)


class _DenialNoise(logging.Filter):
    """uvicorn's sans-io WebSocket protocol logs an error after every refused upgrade (a
    ``send_denial_response``, our 4xx answers to exec/port-forward) although the client got
    the response; drop that one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing handshake" not in record.getMessage()


_uvicorn_log = logging.getLogger("uvicorn.error")
if not any(isinstance(f, _DenialNoise) for f in _uvicorn_log.filters):
    _uvicorn_log.addFilter(_DenialNoise())


class K8sEmulator:
    """A running emulated cluster; use as a context manager.

    ``namespaces``: where the token may act (403 elsewhere); ``queues``: Volcano queues;
    ``pvcs``: ``{(namespace, claim): host dir}``; ``bin_dir``: first on every pod's PATH;
    ``validate``: the vcjob validator (422 on messages); ``volcano_installed=False``: the
    Volcano groups answer 404. ``state_dir`` (default: a temporary folder) holds pod logs
    and secret volumes.
    """

    def __init__(
        self,
        *,
        namespaces: Sequence[str] = ("tcl",),
        queues: Sequence[QueueSpec] = (QueueSpec("default"),),
        pvcs: Mapping[tuple[str, str], Path] | None = None,
        bin_dir: Path | None = None,
        validate: Validator = minimal_vcjob_check,
        volcano_installed: bool = True,
        grace_s: float = 2.0,
        network: Network | None = None,
        state_dir: Path | None = None,
        token: str = "k8semu-token",
        user: str = "system:serviceaccount:tcl:tcl",
        port: int = 0,
    ) -> None:
        self._tmp_state = state_dir is None
        state = state_dir if state_dir is not None else Path(tempfile_dir())
        self.config = EmulatorConfig(
            token=token,
            user=user,
            namespaces=tuple(namespaces),
            queues=tuple(queues),
            pvcs=dict(pvcs or {}),
            bin_dir=bin_dir,
            volcano_installed=volcano_installed,
            validate=validate,
            grace_s=grace_s,
            network=network or Network(),
            state_dir=state,
        )
        self.network = PodNetwork(self.config.network)
        self.cluster = Cluster(self.config, self.network)
        self.controller = Controller(self.cluster)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port))
        self.port: int = self._sock.getsockname()[1]
        self.api = Api(self.cluster, self.controller, f"127.0.0.1:{self.port}")
        self._server = uvicorn.Server(
            uvicorn.Config(
                build_app(self.api),
                log_level="warning",
                lifespan="off",
                ws_ping_interval=None,
            )
        )
        self._thread: threading.Thread | None = None
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()
        # tracebacks of controller ticks that raised (the fixtures fail a test that has any)
        self.errors: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> K8sEmulator:
        self.network.setup()
        self._ticker = threading.Thread(target=self._tick, daemon=True)
        self._ticker.start()
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                self.stop()
                raise RuntimeError("the Kubernetes emulator did not start")
            time.sleep(0.01)
        return self

    def _tick(self) -> None:
        while not self._stop.wait(self.config.tick_s):
            try:
                with self.cluster.lock:
                    self.controller.reconcile()
            except Exception:  # an emulator bug: keep ticking, let the test fail on it
                self.errors.append(traceback.format_exc())
                log.exception("k8semu controller tick failed")
                time.sleep(0.5)

    def stop(self) -> None:
        """Stop the controller, every pod (SIGTERM, grace, SIGKILL), the server; remove the
        pods' netns, veths, hosts files, the bridge and the FORWARD rule if this made them."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=10)
        self.cluster.shutdown()
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._sock.close()
        self.network.teardown()
        if self._tmp_state:
            shutil.rmtree(self.config.state_dir, ignore_errors=True)

    def __enter__(self) -> K8sEmulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- test helpers ------------------------------------------------------------------------

    def write_kubeconfig(self, path: Path, namespace: str | None = None) -> Path:
        """A kubeconfig for the client: cluster ``k8semu``, user with the token, a context with
        ``namespace`` (default: the first allowed one) as current-context."""
        ns = namespace or self.config.namespaces[0]
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "k8semu", "cluster": {"server": self.url}}],
            "users": [{"name": "k8semu-user", "user": {"token": self.config.token}}],
            "contexts": [
                {
                    "name": "k8semu",
                    "context": {"cluster": "k8semu", "user": "k8semu-user", "namespace": ns},
                }
            ],
            "current-context": "k8semu",
        }
        path.write_text(yaml.safe_dump(doc))
        return path

    def _call(self, method: str, path: str) -> dict[str, Any]:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            resp = client.request(method, path)
        resp.raise_for_status()
        out: dict[str, Any] = resp.json()
        return out

    def evict(self, namespace: str, pod: str) -> dict[str, Any]:
        """Evict a running pod as node pressure would: SIGTERM to its process group, the grace
        period, SIGKILL; it turns Failed with reason Evicted (then its job's PodEvicted
        policy applies). Returns the pod once stopped."""
        return self._call("POST", f"/emulator/evict/{namespace}/{pod}")

    def pod_info(self, namespace: str, pod: str) -> dict[str, Any]:
        """``{pid, netns, ip, job}`` of a pod (pid/netns/ip None before it runs)."""
        return self._call("GET", f"/emulator/pods/{namespace}/{pod}")


def tempfile_dir() -> str:
    import tempfile

    return tempfile.mkdtemp(prefix="k8semu-")
