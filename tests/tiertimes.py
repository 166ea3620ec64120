"""A per-tier time table at the end of a pytest run (``scripts/test.sh`` prints it): wall time
spent in setup, call and teardown of each tier's tests, by folder (``unit/control``,
``integration/slurm``...), with counts and the slowest test of each."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

_TESTS = Path(__file__).parent


@dataclass
class _Tier:
    seconds: float = 0.0
    tests: set[str] = field(default_factory=set)
    slowest: tuple[float, str] = (0.0, "")


_tiers: dict[str, _Tier] = {}
_per_test: dict[str, float] = {}
_per_worker: dict[str, float] = {}  # pytest-xdist worker (gw0...) -> seconds of tests it ran
_groups: dict[str, dict[str, float]] = {}  # worker -> xdist group -> seconds


def _tier_of(nodeid: str) -> str:
    parts = Path(nodeid.split("::", 1)[0]).parts  # tests/<tier>/<area>/test_x.py
    if len(parts) >= 4:
        return f"{parts[1]}/{parts[2]}"
    return parts[1] if len(parts) >= 3 else "other"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tier = _tiers.setdefault(_tier_of(report.nodeid), _Tier())
    tier.seconds += report.duration
    tier.tests.add(report.nodeid)
    spent = _per_test[report.nodeid] = _per_test.get(report.nodeid, 0.0) + report.duration
    node = getattr(report, "node", None)  # the xdist worker that ran it (controller side)
    worker = getattr(getattr(node, "gateway", None), "id", None)
    if isinstance(worker, str):
        _per_worker[worker] = _per_worker.get(worker, 0.0) + report.duration
        group = report.nodeid.rsplit("@", 1)[-1] if "@" in report.nodeid else "-"
        by_group = _groups.setdefault(worker, {})
        by_group[group] = by_group.get(group, 0.0) + report.duration
    if spent > tier.slowest[0]:
        tier.slowest = (spent, report.nodeid.split("::", 1)[-1].split("@", 1)[0])


def _write_durations() -> None:
    """Every test's seconds, slowest first, to ``$TCL_TEST_DURATIONS`` (scripts/test.sh names
    ``test-artefacts/durations.json``): where the suite's time goes, file by file."""
    path = os.environ.get("TCL_TEST_DURATIONS")
    if not path or not _per_test:
        return
    ranked = sorted(_per_test.items(), key=lambda kv: -kv[1])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps({"version": 1, "seconds": dict(ranked)}, indent=0) + "\n")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _tiers:
        return
    _write_durations()
    tr = terminalreporter
    tr.section("time per tier (setup + call + teardown)")
    tr.write_line(f"{'tier':<24} {'tests':>6} {'seconds':>9}  slowest")
    total = 0.0
    for name, tier in sorted(_tiers.items(), key=lambda kv: -kv[1].seconds):
        total += tier.seconds
        slow_s, slow = tier.slowest
        tr.write_line(
            f"{name:<24} {len(tier.tests):>6} {tier.seconds:>9.1f}  {slow_s:.1f} s {slow[:60]}"
        )
    tr.write_line(f"{'all':<24} {len(_per_test):>6} {total:>9.1f}")
    for worker, seconds in sorted(_per_worker.items()):
        top = sorted(_groups[worker].items(), key=lambda kv: -kv[1])[:3]
        groups = ", ".join(f"{g} {t:.0f} s" for g, t in top)
        tr.write_line(f"worker {worker:<17} {seconds:>16.1f}  most: {groups}"[:110])
