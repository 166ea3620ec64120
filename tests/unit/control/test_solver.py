"""Solver against fake shims at the typed seam (a ``HostInfo`` per host; no network)."""

from __future__ import annotations

import pytest

from tcl.control.config import parse_config
from tcl.control.errors import NoPlacementError, SshConnectError
from tcl.control.solver import Request, solve
from tcl.shim.api import Accelerator, HostInfo

CFG = parse_config("""
clusters: {a: {}, b: {}}
hosts:
  small: {type: ssh, ssh: s, cluster: a}
  big: {type: ssh, ssh: b, cluster: b, chips: {h100: 8}}
  amp: {type: ssh, ssh: m, cluster: a, chips: {a100: 4}}
  down: {type: ssh, ssh: d}
  slurm1: {type: slurm, ssh: l}
priority: [down, small, big]
""")


def _host(chip: str, n: int, held: int = 0) -> HostInfo:
    accs = [
        Accelerator(index=i, chip=chip, vendor="fake", task_id="t" if i < held else None)
        for i in range(n)
    ]
    return HostInfo(hostname=chip, cpus=4, memory_bytes=1, accelerators=accs, executors=[])


class FakeShims:
    """Stands in for the shims' ``GET /api/host`` (what each host reports right now)."""

    def __init__(self) -> None:
        self.infos = {"small": _host("h100", 2), "big": _host("h100", 8, held=5),
                      "amp": _host("a100", 4)}  # fmt: skip
        self.probed: list[str] = []

    async def __call__(self, name: str) -> HostInfo:
        self.probed.append(name)
        if name == "down":
            raise SshConnectError("ssh down: connection refused")
        return self.infos[name]


async def test_priority_order_and_unreachable_skipped() -> None:
    shims = FakeShims()
    sol = await solve(CFG, Request(chip="h100", chips=2), shims)
    assert [c.host for c in sol.candidates] == ["small", "big"]
    assert sol.candidates[1].free == (5, 6, 7)
    reasons = dict(sol.skipped)
    assert reasons["down"].startswith("unreachable: ssh down: connection refused")
    assert "not handled" in reasons["slurm1"]
    assert "configured chips: a100:4" in reasons["amp"]
    assert "amp" not in shims.probed  # ruled out by its config, never contacted


async def test_free_counts_exclude_held_accelerators() -> None:
    sol = await solve(CFG, Request(chip="h100", chips=3), FakeShims())
    assert [c.host for c in sol.candidates] == ["big"]
    assert dict(sol.skipped)["small"] == "h100: 2 of 2 free"


async def test_nothing_fits_lists_every_host() -> None:
    with pytest.raises(NoPlacementError) as e:
        await solve(CFG, Request(chip="h100", chips=4), FakeShims())
    msg = str(e.value)
    assert msg.startswith("nothing fits 4 x h100")
    assert "  big: h100: 3 of 8 free" in msg
    assert "  small: h100: 2 of 2 free" in msg
    assert "  down: unreachable" in msg
    assert "  amp: configured chips: a100:4" in msg


async def test_filters_and_pin() -> None:
    sol = await solve(CFG, Request(chip="a100", chips=1, preferred_clusters=("a",)), FakeShims())
    assert [c.host for c in sol.candidates] == ["amp"]
    sol = await solve(CFG, Request(chips=0, host="big"), FakeShims())
    assert [c.host for c in sol.candidates] == ["big"]
    with pytest.raises(NoPlacementError, match="no host named 'nope'"):
        await solve(CFG, Request(host="nope"), FakeShims())
    sol = await solve(CFG, Request(chip="h100", chips=1, forbidden_clusters=("a",)), FakeShims())
    assert [c.host for c in sol.candidates] == ["big"]


async def test_an_unreachable_pinned_host_is_named_with_the_reason() -> None:
    with pytest.raises(NoPlacementError) as e:
        await solve(CFG, Request(chips=0, host="down"), FakeShims())
    assert str(e.value) == "host down is unreachable: ssh down: connection refused"
    assert "nothing fits" not in str(e.value)
