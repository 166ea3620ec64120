"""The Kubernetes + Volcano emulator's fixtures (``tests.k8semu.fixtures``)."""

from __future__ import annotations

from tests.k8semu.fixtures import k8semu_factory

__all__ = ["k8semu_factory"]
