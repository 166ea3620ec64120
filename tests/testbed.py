"""Fixtures that start the real services integration tests need.

Each fixture calls the project's own scripts in ``scripts/testbed`` (the same ones ``.ci/run``
uses), so a test run on a fresh machine installs and starts what it needs by itself. Nothing
here is mocked: dockerd, sshd and PostgreSQL are the real daemons from Debian's packages.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts" / "testbed"
DOCKER_CLI = "/usr/bin/docker"
BASE_IMAGE = os.environ.get("TCL_TEST_BASE_IMAGE", "tcl-pybase:bookworm")


def run_script(name: str, env: dict[str, str] | None = None) -> str:
    """Run one testbed script; fail the test with its output when it fails."""
    proc = subprocess.run(
        ["bash", str(SCRIPTS / name)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"{name} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


@pytest.fixture(scope="session")
def docker_client() -> Any:
    """A docker SDK client for a running dockerd (started by the testbed script if needed)."""
    import docker

    if shutil.which("dockerd") is None:
        run_script("install.sh")
    run_script("dockerd-up.sh")
    return docker.from_env()


@pytest.fixture(scope="session")
def base_image(docker_client: Any) -> str:
    """The local Python base image (debootstrapped Debian, imported; no registry needed)."""
    run_script("base-image.sh", {"IMAGE": BASE_IMAGE})
    return BASE_IMAGE


def runner_image_tag(base: str | None = None) -> str:
    """Tag derived from everything that goes into the runner image, so worktrees never clash.
    ``base``: an image other than the default base, whose id then goes into the tag too."""
    h = hashlib.sha256()
    inputs = [REPO / "Dockerfile.runner", REPO / "pyproject.toml"]
    inputs += sorted((REPO / "images").rglob("*"))
    inputs += sorted((REPO / "tcl").rglob("*.py"))
    for path in inputs:
        if path.is_file():
            h.update(str(path.relative_to(REPO)).encode())
            h.update(path.read_bytes())
    if base is not None:
        h.update(image_id(base).encode())
    return f"tcl-runner:{h.hexdigest()[:12]}"


def image_id(image: str) -> str:
    out = subprocess.run(
        [DOCKER_CLI, "image", "inspect", "-f", "{{.Id}}", image],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def build_image(tag: str, context: Path, dockerfile: str, *build_args: str) -> str:
    """``docker build`` unless ``tag`` exists already (tags are content hashes: cached)."""
    probe = subprocess.run([DOCKER_CLI, "image", "inspect", tag], capture_output=True, check=False)
    if probe.returncode == 0:
        return tag
    args = [a for kv in build_args for a in ("--build-arg", kv)]
    proc = subprocess.run(
        [DOCKER_CLI, "build", "-q", "--force-rm", *args, "-f", "-", "-t", tag, str(context)],
        input=dockerfile,
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"image build failed ({tag}):\n{proc.stdout}\n{proc.stderr}")
    return tag


def build_runner_image(base: str, default_base: bool = False) -> str:
    """The runner image built from Dockerfile.runner on top of ``base``."""
    tag = runner_image_tag(None if default_base else base)
    return build_image(tag, REPO, (REPO / "Dockerfile.runner").read_text(), f"BASE_IMAGE={base}")


@pytest.fixture(scope="session")
def runner_image(docker_client: Any, base_image: str) -> str:
    """The runner image built from Dockerfile.runner on top of the local base image."""
    return build_runner_image(base_image, default_base=True)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL 15 on loopback; its URL (SQLAlchemy/psycopg form)."""
    env = {"BASE": "/tmp/tcl-testbed-pg", "PGPORT": os.environ.get("TCL_TEST_PGPORT", "54329")}
    url = run_script("pg-up.sh", env).strip().splitlines()[-1]
    try:
        yield url.replace("postgresql://", "postgresql+psycopg://", 1)
    finally:
        run_script("pg-down.sh", env)
