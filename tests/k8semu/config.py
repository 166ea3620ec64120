"""What one emulated cluster holds: who may do what, which queues and PVCs exist, where pods run."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Validator = Callable[[dict[str, Any]], list[str]]
"""``validate(vcjob body) -> messages``; an empty list accepts the body (422 otherwise)."""


def minimal_vcjob_check(body: dict[str, Any]) -> list[str]:
    """The default validator: apiVersion, kind and a non-empty ``spec.tasks`` list."""
    errors: list[str] = []
    if body.get("apiVersion") != "batch.volcano.sh/v1alpha1":
        errors.append(f"apiVersion: Invalid value: {body.get('apiVersion')!r}")
    if body.get("kind") != "Job":
        errors.append(f"kind: Invalid value: {body.get('kind')!r}")
    tasks = (body.get("spec") or {}).get("tasks")
    if not isinstance(tasks, list) or not tasks:
        errors.append("spec.tasks: Required value")
    return errors


@dataclass(frozen=True)
class QueueSpec:
    """A Volcano queue: ``capability`` maps resource names to amounts (``{"nvidia.com/gpu": 8}``).

    Only the keys listed here are accounted; a pod asking for others always fits.
    """

    name: str
    capability: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Network:
    """The pods' bridge: gateway ``<prefix>.1``, pods from ``<prefix>.10`` upward."""

    bridge: str = "br-k8semu"
    prefix: str = "10.214.0"


@dataclass
class EmulatorConfig:
    token: str = "k8semu-token"
    user: str = "system:serviceaccount:tcl:tcl"
    namespaces: tuple[str, ...] = ("tcl",)
    queues: tuple[QueueSpec, ...] = (QueueSpec("default"),)
    # (namespace, claim name) -> host directory bound at the volume's mountPath
    pvcs: Mapping[tuple[str, str], Path] = field(default_factory=dict)
    # prefixed to every container's PATH (the image is ignored: commands run on the host)
    bin_dir: Path | None = None
    volcano_installed: bool = True
    validate: Validator = minimal_vcjob_check
    # seconds between SIGTERM and SIGKILL when a pod is stopped (deletion, eviction, restart)
    grace_s: float = 2.0
    network: Network = field(default_factory=Network)
    state_dir: Path = Path("/tmp/k8semu")
    tick_s: float = 0.05
