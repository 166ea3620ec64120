"""Accelerator inventory: NVIDIA GPUs (nvidia-smi), TPU chips (/dev/accel*, /dev/vfio), fakes.

The parsers are pure functions over the tools' text output (tested against captured outputs in
``tests/unit/shim/data``); ``discover`` runs the tools. Topology (NVLink groups, NUMA nodes) is
read from ``nvidia-smi topo -m`` and only used to prefer GPUs that share a domain.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tcl.shim.api import Accelerator
from tcl.shim.errors import BadRequest

log = logging.getLogger(__name__)

BUSY_OUTSIDE_MIB = 100  # a GPU used this much by a process outside tcl counts as busy
NVIDIA_SMI_TIMEOUT_S = 10.0
GPU_QUERY = ["--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"]
APPS_QUERY = ["--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro"}
_JOINED_PREFIXES = {"rtx", "gtx", "titan"}


@dataclass(frozen=True)
class Topology:
    """Domains of GPU indices, best first: NVLink groups, then NUMA nodes."""

    nvlink_groups: list[frozenset[int]] = field(default_factory=list)
    numa_groups: list[frozenset[int]] = field(default_factory=list)

    @property
    def domains(self) -> list[frozenset[int]]:
        return [g for g in self.nvlink_groups if len(g) > 1] + [
            g for g in self.numa_groups if len(g) > 1
        ]


@dataclass
class Inventory:
    accelerators: list[Accelerator]
    topology: Topology = field(default_factory=Topology)


def chip_from_name(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100', 'A100-SXM4-80GB' -> 'a100', 'RTX 4090' -> 'rtx4090'."""
    words = [w for w in name.split() if w.lower() not in _VENDOR_WORDS]
    if not words:
        return name.strip().lower() or "gpu"
    first = words[0].lower()
    if first in _JOINED_PREFIXES and len(words) > 1:
        return first + words[1].lower()
    return first.split("-")[0]


def _mib(value: str) -> int | None:
    value = value.strip()
    try:
        return int(float(value))
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_gpu_query(text: str) -> list[Accelerator]:
    """Parse ``nvidia-smi --query-gpu=index,uuid,name,memory.total`` (csv, noheader, nounits)."""
    gpus: list[Accelerator] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4 or not cells[0].isdigit():
            raise ValueError(f"nvidia-smi gpu query line {lineno} not understood: {line!r}")
        index, uuid, name, mem = cells
        gpus.append(
            Accelerator(
                index=int(index),
                chip=chip_from_name(name),
                vendor="nvidia",
                name=name,
                uuid=uuid,
                memory_bytes=(_mib(mem) or 0) * 2**20,
            )
        )
    return sorted(gpus, key=lambda a: a.index)


def parse_apps_query(text: str) -> dict[str, int]:
    """Parse ``--query-compute-apps=gpu_uuid,pid,used_memory``: MiB used per GPU UUID.

    A process whose usage cannot be read (``[N/A]``) counts as using the threshold, so a GPU
    with an unmeasurable outside process is treated as busy rather than free.
    """
    used: dict[str, int] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 3 or not cells[0].startswith("GPU-"):
            continue
        mib = _mib(cells[2])
        used[cells[0]] = used.get(cells[0], 0) + (BUSY_OUTSIDE_MIB if mib is None else mib)
    return used


def parse_topology(text: str) -> Topology:
    """Parse ``nvidia-smi topo -m``: NVLink-connected groups and NUMA affinity per GPU."""
    lines = [_ANSI.sub("", line).rstrip("\n") for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if "\tGPU0" in line), None)
    if header_at is None:
        return Topology()
    header = [c.strip() for c in lines[header_at].split("\t")]
    gpu_cols = {i: int(c[3:]) for i, c in enumerate(header) if re.fullmatch(r"GPU\d+", c)}
    numa_col = header.index("NUMA Affinity") if "NUMA Affinity" in header else None
    links: dict[int, set[int]] = {}
    numa: dict[str, set[int]] = {}
    for line in lines[header_at + 1 :]:
        cells = [c.strip() for c in line.split("\t")]
        m = re.fullmatch(r"GPU(\d+)", cells[0]) if cells else None
        if m is None:
            if cells and cells[0].startswith("Legend"):
                break
            continue
        gpu = int(m.group(1))
        links.setdefault(gpu, set())
        for col, other in gpu_cols.items():
            if col < len(cells) and cells[col].startswith("NV"):
                links[gpu].add(other)
        if numa_col is not None and numa_col < len(cells):
            node = cells[numa_col]
            if node and node != "N/A":
                numa.setdefault(node, set()).add(gpu)
    return Topology(nvlink_groups=_components(links), numa_groups=_ordered(numa.values()))


def _components(links: dict[int, set[int]]) -> list[frozenset[int]]:
    seen: set[int] = set()
    groups: list[frozenset[int]] = []
    for start in sorted(links):
        if start in seen:
            continue
        group, todo = set(), [start]
        while todo:
            g = todo.pop()
            if g in group:
                continue
            group.add(g)
            todo.extend(links.get(g, set()) | {o for o, peers in links.items() if g in peers})
        seen |= group
        groups.append(frozenset(group))
    return _ordered(groups)


def _ordered(groups: object) -> list[frozenset[int]]:
    return sorted((frozenset(g) for g in groups), key=min)  # type: ignore[attr-defined]


def parse_fake(spec: str) -> list[Accelerator]:
    """``h100:8`` or ``h100:4,a100:2`` -> fake accelerators, indexed in order."""
    out: list[Accelerator] = []
    for part in spec.split(","):
        chip, sep, count = part.strip().partition(":")
        if not chip or not sep or not count.isdigit() or int(count) < 1:
            raise BadRequest(f"--fake-accelerators: {part!r} is not CHIP:COUNT (e.g. h100:8)")
        for _ in range(int(count)):
            out.append(
                Accelerator(
                    index=len(out), chip=chip.lower(), vendor="fake", name=f"fake {chip}", fake=True
                )
            )
    return out


def tpu_chip_from_type(accelerator_type: str | None) -> str:
    """'v4-8' (a node's accelerator type) -> 'tpu-v4'; 'v5litepod-4' -> 'tpu-v5litepod'."""
    generation = (accelerator_type or "").split("-")[0].lower()
    return f"tpu-{generation}" if generation else "tpu"


def _tpu_devices(dev_dir: Path) -> list[Path]:
    """Chip device nodes in chip-index order: ``accelN`` (v2-v5e), else ``vfio/N`` (v5p, v6e).
    ``vfio/vfio`` is the VFIO container, not a chip."""
    accel = [p for p in dev_dir.glob("accel*") if p.name[5:].isdigit()]
    if accel:
        return sorted(accel, key=lambda p: int(p.name[5:]))
    vfio = dev_dir / "vfio"
    if not vfio.is_dir():
        return []
    return sorted((p for p in vfio.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def discover_tpus(dev_dir: Path, chip: str | None) -> list[Accelerator]:
    """TPU chips found under ``dev_dir``, named ``chip`` (e.g. ``tpu-v4``: the generation is
    not in /dev, so the caller says it; default ``tpu``). Index i is the i-th device node, the
    numbering ``TPU_VISIBLE_CHIPS`` uses."""
    name = (chip or "tpu").lower()
    return [
        Accelerator(index=i, chip=name, vendor="tpu", name=f"TPU {name} chip {i} ({p.name})")
        for i, p in enumerate(_tpu_devices(dev_dir))
    ]


def tpu_device_paths(dev_dir: Path, indices: list[int] | None = None) -> list[str]:
    """The device nodes a container needs for the TPU chips ``indices`` (default: all).
    VFIO chips also need the VFIO container node ``vfio/vfio``."""
    devices = _tpu_devices(dev_dir)
    chosen = devices if indices is None else [devices[i] for i in indices if i < len(devices)]
    paths = [str(p) for p in chosen]
    if chosen and chosen[0].parent.name == "vfio":
        paths.insert(0, str(dev_dir / "vfio" / "vfio"))
    return paths


def _nvidia_smi(args: list[str]) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run(
            [exe, *args], capture_output=True, text=True, check=False, timeout=NVIDIA_SMI_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("nvidia-smi %s failed: %s", " ".join(args), e)
        return None
    if proc.returncode != 0:
        log.warning(
            "nvidia-smi %s exited %d: %s",
            " ".join(args),
            proc.returncode,
            proc.stderr.strip()[:200],
        )
        return None
    return proc.stdout


def discover(
    fake: str | None, dev_dir: Path = Path("/dev"), tpu_chip: str | None = None
) -> Inventory:
    """Fake accelerators if asked; else NVIDIA GPUs; else TPU chips (named ``tpu_chip``, else
    from ``TPU_ACCELERATOR_TYPE`` as TPU VM images set it); else none."""
    if fake:
        return Inventory(parse_fake(fake))
    out = _nvidia_smi(GPU_QUERY)
    if out:
        gpus = parse_gpu_query(out)
        if gpus:
            topo_text = _nvidia_smi(["topo", "-m"]) or ""
            return Inventory(gpus, parse_topology(topo_text))
    chip = tpu_chip or tpu_chip_from_type(os.environ.get("TPU_ACCELERATOR_TYPE"))
    tpus = discover_tpus(dev_dir, chip)
    return Inventory(tpus)


def outside_usage_mib() -> dict[str, int]:
    """MiB used per GPU UUID by compute processes (empty without nvidia-smi)."""
    out = _nvidia_smi(APPS_QUERY)
    return parse_apps_query(out) if out else {}
