"""A Kubernetes API server + Volcano emulator for tests (``K8sEmulator`` in ``.server``)."""

from tests.k8semu.config import Network, QueueSpec, minimal_vcjob_check
from tests.k8semu.server import K8sEmulator

__all__ = ["K8sEmulator", "Network", "QueueSpec", "minimal_vcjob_check"]
