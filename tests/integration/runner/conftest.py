"""A runner container from the real image on the real dockerd: bridge mode, the runner and sshd
ports published on 127.0.0.1 ephemeral ports, an ssh key made with ssh-keygen for the test."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@dataclass
class RunnerContainer:
    container: Any
    api_port: int
    ssh_port: int
    key: Path
    wrong_key: Path
    token: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def ssh(self, command: str, key: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "ssh",
                "-p",
                str(self.ssh_port),
                "-i",
                str(key or self.key),
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "BatchMode=yes",
                "-o",
                "StrictHostKeyChecking=no",
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "LogLevel=ERROR",
                "-o",
                "ConnectTimeout=10",
                "root@127.0.0.1",
                command,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


@pytest.fixture
def runner_container(
    docker_client: Any, runner_image: str, tmp_path: Path
) -> Iterator[RunnerContainer]:
    key, wrong = keygen(tmp_path / "id_ok"), keygen(tmp_path / "id_wrong")
    # The bearer token, handed over as the shim does: a 0600 file bind-mounted read-only.
    token = secrets.token_urlsafe(32)
    token_file = tmp_path / "runner-token"
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    name = f"tcl-test-runner-{uuid.uuid4().hex[:10]}"
    container = docker_client.containers.run(
        runner_image,
        name=name,
        detach=True,
        labels={"tcl.test": "runner"},
        environment={
            "TCL_SSH_AUTHORIZED_KEYS": (tmp_path / "id_ok.pub").read_text(),
            "TCL_RUNNER_TOKEN_FILE": "/run/tcl-runner-token",
        },
        volumes={str(token_file): {"bind": "/run/tcl-runner-token", "mode": "ro"}},
        ports={"10999/tcp": ("127.0.0.1", None), "10022/tcp": ("127.0.0.1", None)},
    )
    try:
        container.reload()
        ports = container.ports
        rc = RunnerContainer(
            container,
            int(ports["10999/tcp"][0]["HostPort"]),
            int(ports["10022/tcp"][0]["HostPort"]),
            key,
            wrong,
            token,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{rc.url}/api/healthcheck", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"runner container never answered:\n{container.logs().decode()}")
                time.sleep(0.1)
        yield rc
    finally:
        container.remove(force=True)
