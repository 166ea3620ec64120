"""The Kubernetes API as the Volcano backend uses it, through the official ``kubernetes`` client.

One :class:`KubeClient` per host (kubeconfig + context, or the in-cluster service account) and
namespace. Its calls are synchronous (the client is): the backend runs them in a thread. Every
call goes through :func:`~tcl.control.backends.volcano.kubeerrors.translated`, so a caller sees
only tcl's errors, one line each.

Besides CRUD it speaks the API server's two streaming protocols, as ``kubectl`` does:
``pods/exec`` (a command's stdin, stdout and exit code over a WebSocket: the code upload) and
``pods/portforward`` (:class:`PortForward`: a local TCP port whose connections reach a pod's
port, each through its own WebSocket: the runner's HTTP API).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tcl.control.backends.volcano.kubeerrors import (
    KubeNotFoundError,
    VolcanoMissingError,
    translated,
)

log = logging.getLogger(__name__)

VC_GROUP, VC_VERSION, VC_PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL = "scheduling.volcano.sh", "v1beta1", "queues"
CHUNK_BYTES = 256 * 1024
EXEC_TIMEOUT_S = 600.0


@contextlib.contextmanager
def absent_is_none(what: str, namespace: str) -> Iterator[None]:
    """``translated``, with a missing object (404) ending the block quietly: the caller then
    goes on after it (its "not there" answer). Volcano itself missing still raises."""
    try:
        with translated(what, namespace):
            yield
    except VolcanoMissingError:
        raise
    except KubeNotFoundError:
        return


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes


class KubeClient:
    """The calls tcl makes in one namespace of one cluster."""

    def __init__(self, kubeconfig: str | None, context: str | None, namespace: str) -> None:
        from kubernetes import client as k8s_client
        from kubernetes import config as k8s_config

        # the client's stubs are partial: its objects are used as they are documented
        client: Any = k8s_client
        config: Any = k8s_config
        self.namespace = namespace
        cfg = client.Configuration()
        with translated("load the Kubernetes config", namespace):
            in_cluster = kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ
            if in_cluster:
                config.load_incluster_config(client_configuration=cfg)
            else:
                path = os.path.expanduser(kubeconfig) if kubeconfig else None
                config.load_kube_config(config_file=path, context=context, client_configuration=cfg)
        self.server = str(cfg.host)
        self._cfg = cfg
        self.api: Any = client.ApiClient(cfg)
        self.core: Any = client.CoreV1Api(self.api)
        self.custom: Any = client.CustomObjectsApi(self.api)

    def close(self) -> None:
        self.api.close()

    def _stream_core(self) -> Any:
        """A CoreV1Api of its own for one exec or port-forward: ``kubernetes.stream`` swaps
        its client's ``request`` for a WebSocket call while it connects, so a shared client
        would send another thread's plain calls there."""
        from kubernetes import client as k8s_client

        client: Any = k8s_client
        return client.CoreV1Api(client.ApiClient(self._cfg))

    # Volcano jobs and queues -----------------------------------------------------------------

    def create_vcjob(self, body: dict[str, Any]) -> dict[str, Any]:
        with translated("create vcjobs", self.namespace):
            out: dict[str, Any] = self.custom.create_namespaced_custom_object(
                VC_GROUP, VC_VERSION, self.namespace, VC_PLURAL, body
            )
        return out

    def get_vcjob(self, name: str) -> dict[str, Any] | None:
        """The job, or None when it is gone."""
        with absent_is_none("get vcjobs", self.namespace):
            found: dict[str, Any] = self.custom.get_namespaced_custom_object(
                VC_GROUP, VC_VERSION, self.namespace, VC_PLURAL, name
            )
            return found
        return None

    def vcjobs(self, label_selector: str) -> list[dict[str, Any]]:
        """The jobs matching the selector (their JSON objects)."""
        with translated("list vcjobs", self.namespace):
            found: dict[str, Any] = self.custom.list_namespaced_custom_object(
                VC_GROUP, VC_VERSION, self.namespace, VC_PLURAL, label_selector=label_selector
            )
        return list(found.get("items") or [])

    def delete_vcjob(self, name: str) -> None:
        """Delete the job and (in the background, as the API server does) its pods."""
        with absent_is_none("delete vcjobs", self.namespace):
            self.custom.delete_namespaced_custom_object(
                VC_GROUP,
                VC_VERSION,
                self.namespace,
                VC_PLURAL,
                name,
                propagation_policy="Background",
            )

    def get_queue(self, name: str) -> dict[str, Any] | None:
        with absent_is_none("get queues", self.namespace):
            found: dict[str, Any] = self.custom.get_cluster_custom_object(
                QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, name
            )
            return found
        return None

    # core objects ----------------------------------------------------------------------------

    def pvc_exists(self, name: str) -> bool:
        with absent_is_none("get persistentvolumeclaims", self.namespace):
            self.core.read_namespaced_persistent_volume_claim(name, self.namespace)
            return True
        return False

    def create_secret(self, name: str, data: dict[str, bytes], labels: dict[str, str]) -> None:
        import base64

        from kubernetes import client

        body = client.V1Secret(
            metadata=client.V1ObjectMeta(name=name, labels=labels),
            type="Opaque",
            data={k: base64.b64encode(v).decode() for k, v in data.items()},
        )
        with translated("create secrets", self.namespace):
            self.core.create_namespaced_secret(self.namespace, body)

    def read_secret(self, name: str) -> dict[str, bytes]:
        import base64

        with translated("get secrets", self.namespace):
            data = self.core.read_namespaced_secret(name, self.namespace).data or {}
        return {k: base64.b64decode(v) for k, v in data.items()}

    def delete_secret(self, name: str) -> None:
        with absent_is_none("delete secrets", self.namespace):
            self.core.delete_namespaced_secret(name, self.namespace)

    def pods(self, label_selector: str) -> list[Any]:
        """``V1Pod`` objects matching the selector."""
        with translated("list pods", self.namespace):
            return list(
                self.core.list_namespaced_pod(self.namespace, label_selector=label_selector).items
            )

    def get_pod(self, name: str) -> Any | None:
        with absent_is_none("get pods", self.namespace):
            return self.core.read_namespaced_pod(name, self.namespace)
        return None

    def create_pod(self, body: dict[str, Any]) -> None:
        with translated("create pods", self.namespace):
            self.core.create_namespaced_pod(self.namespace, body)

    def delete_pod(self, name: str) -> None:
        with absent_is_none("delete pods", self.namespace):
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)

    def pod_log(self, name: str, tail_lines: int | None = None) -> str:
        with absent_is_none("get pods/log", self.namespace):
            text: str = self.core.read_namespaced_pod_log(
                name, self.namespace, tail_lines=tail_lines
            )
            return text
        return ""

    # streams ---------------------------------------------------------------------------------

    def open_exec(self, pod: str, argv: list[str], stdin: bool, tty: bool = False) -> Any:
        """The ``pods/exec`` stream of ``argv`` in ``pod`` (``kubernetes.stream.WSClient``,
        bytes on every channel; with ``tty`` a terminal: no stderr channel, as kubectl's -t)."""
        from kubernetes.stream import stream

        with translated("create pods/exec", self.namespace):
            return stream(
                self._stream_core().connect_get_namespaced_pod_exec,
                pod,
                self.namespace,
                command=argv,
                stdin=stdin,
                stdout=True,
                stderr=not tty,
                tty=tty,
                _preload_content=False,
                binary=True,
            )

    def exec(
        self,
        pod: str,
        argv: list[str],
        stdin: Path | None = None,
        progress: Callable[[int, int], None] | None = None,
        timeout_s: float = EXEC_TIMEOUT_S,
    ) -> ExecResult:
        """Run ``argv`` in ``pod``, its stdin the file ``stdin`` (closed at its end), and wait
        for its exit code."""
        ws = self.open_exec(pod, argv, stdin=stdin is not None)
        out, err = bytearray(), bytearray()
        try:
            if stdin is not None:
                total, sent = stdin.stat().st_size, 0
                with stdin.open("rb") as f:
                    while chunk := f.read(CHUNK_BYTES):
                        ws.write_stdin(chunk)
                        sent += len(chunk)
                        ws.update(timeout=0)
                        out += ws.read_stdout(timeout=0) or b""
                        err += ws.read_stderr(timeout=0) or b""
                        if progress is not None:
                            progress(sent, total)
                ws.close_channel(0)
            ws.run_forever(timeout=timeout_s)
            out += ws.read_stdout(timeout=0) or b""
            err += ws.read_stderr(timeout=0) or b""
            code = ws.returncode
        finally:
            ws.close()
        return ExecResult(-1 if code is None else int(code), bytes(out), bytes(err))

    def port_forward(self, pod: str, port: int) -> PortForward:
        return PortForward(self, pod, port)


class PortForward:
    """A local port (127.0.0.1) forwarding each connection to ``pod``:``port`` through the API
    server's ``pods/portforward`` (one WebSocket per connection, as ``kubectl port-forward``)."""

    def __init__(self, kube: KubeClient, pod: str, port: int) -> None:
        self.kube, self.pod, self.port = kube, pod, port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.local_port = int(self._listener.getsockname()[1])
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name=f"pf-{pod}", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}"

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        from kubernetes.stream import portforward

        try:
            with translated("create pods/portforward", self.kube.namespace):
                core = self.kube._stream_core()
                pf = portforward(
                    core.connect_get_namespaced_pod_portforward,
                    self.pod,
                    self.kube.namespace,
                    ports=str(self.port),
                )
            remote = pf.socket(self.port)
            remote.setblocking(True)
        except Exception as e:  # the client sees its connection close
            log.info("port-forward to %s:%s failed: %s", self.pod, self.port, e)
            conn.close()
            return
        done = threading.Event()

        def pipe(src: Any, dst: Any) -> None:
            try:
                while data := src.recv(CHUNK_BYTES):
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                done.set()

        threading.Thread(target=pipe, args=(remote, conn), daemon=True).start()
        threading.Thread(target=pipe, args=(conn, remote), daemon=True).start()
        done.wait()
        for s in (conn, remote):
            with contextlib.suppress(OSError):
                s.close()
        with contextlib.suppress(Exception):
            pf.close()
