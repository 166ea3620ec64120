"""What ``sinfo`` and ``squeue`` print, parsed; offers computed from it (pure functions)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tcl.control.states import RunState

# one SSH command per solve: every (node, partition) row with its GRES, GRES in use and state
SINFO_ARGV = ["sinfo", "-h", "-N", "-O", "NodeList:|,Partition:|,Gres:|,GresUsed:|,StateLong:|"]
SQUEUE_FIELDS = "JobID:|,State:|,Reason:|,RestartCnt:|,NodeList:|"

_USABLE = {"idle", "mixed", "allocated", "completing", "planned"}
_GRES = re.compile(r"^([^:()]+):([^:()]+):(\d+)")


@dataclass(frozen=True)
class NodeRow:
    node: str
    partition: str
    default: bool  # the cluster's default partition
    gres: dict[str, int]  # "gpu:h100" -> count
    used: dict[str, int]
    state: str

    @property
    def usable(self) -> bool:
        return self.state.rstrip("*~#!%$@^-+").lower() in _USABLE

    def free(self, gres: str) -> int:
        if self.state.rstrip("*~#!%$@^-+").lower() not in ("idle", "mixed", "planned"):
            return 0
        return max(0, self.gres.get(gres, 0) - self.used.get(gres, 0))


def parse_gres(text: str) -> dict[str, int]:
    """``gpu:h100:4(S:0-1),gpu:a100:2`` → ``{"gpu:h100": 4, "gpu:a100": 2}``."""
    out: dict[str, int] = {}
    for part in re.split(r",(?![^()]*\))", text.strip()):
        m = _GRES.match(part.strip())
        if m:
            key = f"{m.group(1)}:{m.group(2)}"
            out[key] = out.get(key, 0) + int(m.group(3))
    return out


def parse_sinfo(text: str) -> list[NodeRow]:
    rows = []
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) < 5 or not cols[0].strip():
            continue
        node, part, gres, used, state = (c.strip() for c in cols[:5])
        rows.append(
            NodeRow(
                node,
                part.rstrip("*"),
                part.endswith("*"),
                parse_gres(gres),
                parse_gres(used),
                state,
            )
        )
    return rows


@dataclass(frozen=True)
class JobRow:
    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, ...
    reason: str
    restarts: int
    nodes: str


def parse_squeue(text: str) -> dict[str, JobRow]:
    out = {}
    for line in text.splitlines():
        cols = [c.strip() for c in line.split("|")]
        if len(cols) < 5 or not cols[0]:
            continue
        restarts = int(cols[3]) if cols[3].isdigit() else 0
        out[cols[0]] = JobRow(cols[0], cols[1], cols[2], restarts, cols[4])
    return out


PENDING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "SUSPENDED"}
LIVE = {"RUNNING", "CONFIGURING", "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT"}
_ENDED = {
    "COMPLETED": RunState.SUCCEEDED,
    "CANCELLED": RunState.TERMINATED,
    "PREEMPTED": RunState.TERMINATED,
    "DEADLINE": RunState.TERMINATED,
}


def ended_state(slurm_state: str) -> RunState:
    """A final SLURM job state in the run's terms (FAILED, TIMEOUT, NODE_FAIL, OOM: failed)."""
    return _ENDED.get(slurm_state, RunState.FAILED)


@dataclass(frozen=True)
class Placed:
    partition: str
    gres: str | None  # "gpu:h100"
    chip: str | None
    nodes: int
    chips_per_node: int
    starts_now: bool
    free: int
    reason: str


def place(
    rows: list[NodeRow],
    chip: str | None,
    chips: int,
    nodes: int,
    gres_mapping: dict[str, str],
    partitions: list[str],
    exclude: list[str],
) -> Placed | str:
    """Where a request of ``chips`` x ``chip`` (on ``nodes`` nodes, 0: as needed) goes on this
    cluster: the first partition (config order, else the cluster's default first) that can
    start it now, else the one with the most free GRES; or why none can (a string)."""
    have = sorted({r.partition for r in rows}, key=lambda p: (not _is_default(rows, p), p))
    missing = [p for p in partitions if p not in have]
    if missing:
        return f"partition {', '.join(missing)} not on this cluster (it has: {', '.join(have)})"
    order = partitions or have
    rows = [r for r in rows if r.node not in exclude and r.usable]
    want: list[str | None]
    if chips == 0:
        want = [None]
    elif chip is not None:
        want = [gres_mapping.get(chip, f"gpu:{chip}")]
    else:
        want = [*sorted({g for r in rows for g in r.gres if g.startswith("gpu:")})]
    best: Placed | None = None
    for part in order:
        members = [r for r in rows if r.partition == part]
        for gres in want:
            fit = _fit(members, part, gres, chips, nodes)
            if fit is None:
                continue
            if fit.starts_now:
                return fit
            if best is None or fit.free > best.free:
                best = fit
    if best is not None:
        return best
    offered = _offered(rows, order)
    what = want[0] if len(want) == 1 and want[0] else "a GPU"
    if chips == 0:
        return f"no usable node in partition {', '.join(order)}"
    return (
        f"no partition has {nodes or 1} x {what} for {chips} chips "
        f"(the cluster has: {offered or 'no GPUs'})"
    )


def _is_default(rows: list[NodeRow], part: str) -> bool:
    return any(r.default for r in rows if r.partition == part)


def _offered(rows: list[NodeRow], order: list[str]) -> str:
    by: dict[str, set[str]] = {}
    for r in rows:
        if r.partition in order:
            for g, n in r.gres.items():
                by.setdefault(f"{g}:{n} per node", set()).add(r.partition)
    return "; ".join(f"{g} in {', '.join(sorted(ps))}" for g, ps in sorted(by.items()))


def _fit(rows: list[NodeRow], part: str, gres: str | None, chips: int, nodes: int) -> Placed | None:
    if gres is None:
        count = nodes or 1
        if len(rows) < count:
            return None
        idle = sum(1 for r in rows if r.state.lower().startswith(("idle", "mixed")))
        now = idle >= count
        return Placed(
            part,
            None,
            None,
            count,
            0,
            now,
            idle,
            "" if now else f"Resources: {idle} of {count} nodes idle",
        )
    sizes = [r.gres[gres] for r in rows if r.gres.get(gres)]
    if not sizes:
        return None
    per_node = max(sizes)
    count = nodes or math.ceil(chips / per_node)
    per = math.ceil(chips / count)
    if per > per_node or len([s for s in sizes if s >= per]) < count:
        return None
    free = [r.free(gres) for r in rows if r.gres.get(gres, 0) >= per]
    fitting = sum(1 for f in free if f >= per)
    now = fitting >= count
    chip = gres.split(":", 1)[1]
    total = count * per
    reason = "" if now else f"Resources: {sum(free)} of {total} {chip} free in {part}"
    return Placed(part, gres, chip, count, per, now, sum(free), reason)


def summary(rows: list[NodeRow]) -> str:
    """``tcl hosts --check``: per partition, its GRES free of total."""
    parts: dict[str, list[NodeRow]] = {}
    for r in rows:
        parts.setdefault(r.partition, []).append(r)
    out = []
    for p, rs in parts.items():
        kinds = sorted({g for r in rs for g in r.gres})
        free = ", ".join(
            f"{g.split(':', 1)[-1]}: {sum(r.free(g) for r in rs)} of "
            f"{sum(r.gres.get(g, 0) for r in rs)} free"
            for g in kinds
        )
        out.append(f"{p} ({len(rs)} nodes{': ' + free if free else ''})")
    return "; ".join(out)
