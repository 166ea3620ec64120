"""Exec, port-forward and volumes through the real client's ``kubernetes.stream`` helpers."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import portforward, stream

from tests.integration.k8semu.conftest import NS, Jobs, vcjob, wait_for
from tests.k8semu import K8sEmulator

pytestmark = pytest.mark.volcano

PVC_VOLUME = {"name": "ws", "persistentVolumeClaim": {"claimName": "workspace"}}
PVC_MOUNT = {"name": "ws", "mountPath": "/workspace"}


def _exec(
    core: client.CoreV1Api, pod: str, argv: list[str], stdin: bytes | None = None
) -> tuple[int | None, bytes]:
    ws = stream(
        core.connect_get_namespaced_pod_exec,
        pod,
        NS,
        command=argv,
        stdin=stdin is not None,
        stdout=True,
        stderr=True,
        tty=False,
        _preload_content=False,
        binary=True,
    )
    if stdin is not None:
        for i in range(0, len(stdin), 1 << 20):
            ws.write_stdin(stdin[i : i + (1 << 20)])
        ws.close_channel(0)
    out = b""
    deadline = time.monotonic() + 20
    while ws.is_open() and time.monotonic() < deadline:
        ws.update(timeout=1)
        out += ws.read_stdout(timeout=0) or b""
    out += ws.read_stdout(timeout=0) or b""
    return ws.returncode, out


def test_exec_uploads_into_the_pvc_and_reads_back(
    k8semu: K8sEmulator, k8s_client: client.ApiClient
) -> None:
    jobs = Jobs(k8s_client)
    jobs.create(vcjob("x1", "sleep 60", replicas=1, volumes=[PVC_VOLUME], mounts=[PVC_MOUNT]))
    jobs.wait_phase("x1", "Running")
    payload = os.urandom(3 << 20)
    code, _ = _exec(jobs.core, "x1-worker-0", ["sh", "-c", "cat > /workspace/x"], payload)
    assert code == 0
    host_dir = k8semu.config.pvcs[(NS, "workspace")]
    assert (host_dir / "x").read_bytes() == payload
    code, out = _exec(jobs.core, "x1-worker-0", ["sha256sum", "/workspace/x"])
    assert code == 0 and out.split()[0].decode() == hashlib.sha256(payload).hexdigest()
    # the container's env, and bin_dir first on PATH (where tcl-runner resolves)
    argv = ["sh", "-c", "echo $VC_TASK_INDEX $HOSTNAME; command -v tcl-runner"]
    code, out = _exec(jobs.core, "x1-worker-0", argv)
    assert code == 0 and out.decode().splitlines() == [
        "0 x1-worker-0",
        str(Path(sys.executable).parent / "tcl-runner"),
    ]
    code, out = _exec(jobs.core, "x1-worker-0", ["sh", "-c", "hostname; exit 3"])
    assert code == 3 and out == b"x1-worker-0\n"
    assert not Path("/workspace/x").exists()  # mounted in the pod's own mount namespace only


def test_port_forward_reaches_a_server_in_the_pod(k8s_client: client.ApiClient) -> None:
    jobs = Jobs(k8s_client)
    # the image is ignored (pods see the host's files): serve from the PVC, not the host's /tmp
    script = "cd /workspace && echo hello-pf > pf.txt && exec python -m http.server 8765"
    jobs.create(vcjob("x2", script, replicas=1, volumes=[PVC_VOLUME], mounts=[PVC_MOUNT]))
    jobs.wait_phase("x2", "Running")

    def fetch() -> bytes | None:
        pf = portforward(
            jobs.core.connect_get_namespaced_pod_portforward, "x2-worker-0", NS, ports="8765"
        )
        sock = pf.socket(8765)
        sock.settimeout(5)
        data = b""
        try:  # until the server listens, the emulator reports an error and closes the stream
            sock.sendall(b"GET /pf.txt HTTP/1.0\r\nHost: x\r\n\r\n")
            while chunk := sock.recv(65536):
                data += chunk
        except OSError:
            return None
        finally:
            sock.close()
        err = pf.error(8765)
        return data if err is None and data else None

    data = wait_for(fetch, what="http.server through port-forward")
    assert data.startswith(b"HTTP/1.0 200") and data.endswith(b"hello-pf\n")


def test_secret_volume_files_have_the_default_mode(k8s_client: client.ApiClient) -> None:
    core = client.CoreV1Api(k8s_client)
    core.create_namespaced_secret(
        NS,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="key"), string_data={"id_ed25519": "secret-bytes"}
        ),
    )
    got = core.read_namespaced_secret("key", NS)
    assert got.data == {"id_ed25519": "c2VjcmV0LWJ5dGVz"}
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="helper", labels={"app": "helper"}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[
                client.V1Container(
                    name="main",
                    image="busybox",
                    command=["sh", "-c", "stat -c '%a %s' /keys/id_ed25519; cat /keys/id_ed25519"],
                    volume_mounts=[client.V1VolumeMount(name="k", mount_path="/keys")],
                )
            ],
            volumes=[
                client.V1Volume(
                    name="k",
                    secret=client.V1SecretVolumeSource(secret_name="key", default_mode=0o400),
                )
            ],
        ),
    )
    created = Jobs(k8s_client).core.api_client.sanitize_for_serialization(
        core.create_namespaced_pod(NS, pod)
    )
    assert created["metadata"]["uid"] and created["status"]["phase"] == "Pending"
    jobs = Jobs(k8s_client)
    wait_for(lambda: jobs.pod("helper")["status"]["phase"] == "Succeeded")
    assert core.list_namespaced_pod(NS, label_selector="app=helper,x!=y").items
    assert core.list_namespaced_pod(NS, field_selector="status.phase=Succeeded").items
    assert not core.list_namespaced_pod(NS, field_selector="status.phase!=Succeeded").items
    with pytest.raises(ApiException) as exc:
        core.list_namespaced_pod(NS, field_selector="spec.nope=1")
    assert exc.value.status == 400 and "field label not supported: spec.nope" in str(exc.value.body)
    assert core.read_namespaced_pod_log("helper", NS) == "400 12\nsecret-bytes"
    deleted = core.delete_namespaced_pod("helper", NS)
    assert deleted.metadata is not None and deleted.metadata.deletion_timestamp
    core.delete_namespaced_secret("key", NS)
