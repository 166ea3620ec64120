"""Pytest fixtures for the emulator; a test module's conftest re-exports the ones it uses.

- ``k8semu_factory``: ``make(**K8sEmulator kwargs) -> K8sEmulator``, started, stopped at teardown;
  defaults: namespace ``tcl``, queue ``default`` with ``{"nvidia.com/gpu": 8}``, PVC
  ``workspace`` in ``tcl`` backed by ``<tmp>/pvc-workspace``, the venv's bin on PATH,
  grace 1 s, vcjobs checked against the real CRD (``tests.k8semu.crd``).
- ``k8semu``: one emulator with those defaults.
- ``kubeconfig``: a kubeconfig file for ``k8semu`` (context namespace ``tcl``).
- ``k8s_client``: a ``kubernetes.client.ApiClient`` loaded from that file.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from tests.k8semu.config import QueueSpec
from tests.k8semu.crd import validate_vcjob
from tests.k8semu.server import K8sEmulator

Factory = Callable[..., K8sEmulator]
GPU = "nvidia.com/gpu"


def new_client(kubeconfig: Path) -> client.ApiClient:
    """A ``kubernetes`` client configured from ``kubeconfig`` (as a user would load it)."""
    api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig)
    )
    return api


@pytest.fixture
def k8semu_factory(tmp_path: Path) -> Iterator[Factory]:
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("ip", "unshare", "nsenter")):
        pytest.skip("k8semu needs root and ip/unshare/nsenter (pods get their own namespaces)")
    made: list[K8sEmulator] = []

    def make(**kw: Any) -> K8sEmulator:
        pvc = tmp_path / f"pvc-workspace-{len(made)}"
        pvc.mkdir()
        kw.setdefault("queues", (QueueSpec("default", {GPU: 8}),))
        kw.setdefault("pvcs", {("tcl", "workspace"): pvc})
        kw.setdefault("bin_dir", Path(sys.executable).parent)
        kw.setdefault("grace_s", 1.0)
        kw.setdefault("validate", validate_vcjob)  # the real CRD, strict, and the webhook's rules
        emu = K8sEmulator(**kw)
        made.append(emu)
        return emu.start()

    yield make
    for emu in reversed(made):
        emu.stop()
    bugs = [err for emu in made for err in emu.errors]
    assert not bugs, "the emulator's controller raised:\n" + "\n".join(bugs)


@pytest.fixture
def k8semu(k8semu_factory: Factory) -> K8sEmulator:
    return k8semu_factory()


@pytest.fixture
def kubeconfig(k8semu: K8sEmulator, tmp_path: Path) -> Path:
    return k8semu.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def k8s_client(kubeconfig: Path) -> Iterator[client.ApiClient]:
    api = new_client(kubeconfig)
    yield api
    api.close()  # type: ignore[no-untyped-call]
