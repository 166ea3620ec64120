"""Solver against fake shims at the typed seam (a ``HostInfo`` per host; no network): the
shim-based backend's offers, with its probe answered here."""

from __future__ import annotations

from typing import Any

import pytest

from tcl.control.backends.base import Backend, BackendInputs
from tcl.control.backends.shim import ShimBackend
from tcl.control.backends.shimhost import ShimHost
from tcl.control.backends.table import backend_class
from tcl.control.config import parse_config
from tcl.control.errors import ConfigError, NoPlacementError, SshConnectError
from tcl.control.solver import Request, Solution, solve
from tcl.shim.api import Accelerator, HostInfo

CFG_TEXT = """
clusters: {a: {}, b: {}}
hosts:
  small: {type: ssh, ssh: s, cluster: a}
  big: {type: ssh, ssh: b, cluster: b, chips: {h100: 8}}
  amp: {type: ssh, ssh: m, cluster: a, chips: {a100: 4}}
  down: {type: ssh, ssh: d}
  vol1: {type: volcano, pvc_name: p}
priority: [down, small, big]
"""
CFG = parse_config(CFG_TEXT)


def _host(chip: str, n: int, held: int = 0) -> HostInfo:
    accs = [
        Accelerator(index=i, chip=chip, vendor="fake", task_id="t" if i < held else None)
        for i in range(n)
    ]
    return HostInfo(hostname=chip, cpus=4, memory_bytes=1, accelerators=accs, executors=[])


class FakeShims(ShimBackend):
    """The ssh backend with its shims' ``GET /api/host`` answered here."""

    kind = "ssh"

    def __init__(self, infos: dict[str, HostInfo] | None = None) -> None:
        hosts = {n: h for n, h in CFG.hosts.items() if h.type == "ssh"}
        super().__init__(BackendInputs(hosts, CFG.clusters, {}, lambda: None))  # type: ignore[arg-type,return-value]
        self.infos = infos or {
            "small": _host("h100", 2),
            "big": _host("h100", 8, held=5),
            "amp": _host("a100", 4),
        }
        self.probed: list[str] = []

    def _make_host(self, name: str, record: Any) -> ShimHost:
        raise AssertionError("offers only probe")

    async def probe(self, name: str) -> HostInfo:
        self.probed.append(name)
        if name == "down":
            raise SshConnectError("ssh down: connection refused")
        return self.infos[name]

    async def solve(self, req: Request, cfg: Any = CFG) -> Solution:
        def backend_of(name: str) -> Backend:
            if cfg.hosts[name].type == "ssh":
                return self
            inputs = BackendInputs(dict(cfg.hosts), cfg.clusters, {}, self.inputs.ssh_pool)
            return backend_class(cfg.hosts[name].type)(inputs)

        return await solve(cfg, req, backend_of)


async def test_priority_order_and_unreachable_skipped() -> None:
    shims = FakeShims()
    sol = await shims.solve(Request(chip="h100", chips=2))
    assert [c.host for c in sol.candidates] == ["small", "big"]
    assert sol.candidates[1].nodes[0].free == (5, 6, 7)
    reasons = dict(sol.skipped)
    assert reasons["down"].startswith("unreachable: ssh down: connection refused")
    assert reasons["vol1"] == "no h100 here (chips: none configured)"
    assert "configured chips: a100:4" in reasons["amp"]
    assert "amp" not in shims.probed  # ruled out by its config, never contacted


async def test_free_counts_exclude_held_accelerators() -> None:
    sol = await FakeShims().solve(Request(chip="h100", chips=3))
    assert [c.host for c in sol.candidates] == ["big"]
    assert dict(sol.skipped)["small"] == "h100: 2 of 2 free"


async def test_nothing_fits_lists_every_host() -> None:
    with pytest.raises(NoPlacementError) as e:
        await FakeShims().solve(Request(chip="h100", chips=4))
    msg = str(e.value)
    assert msg.startswith("nothing fits 4 x h100")
    assert "  big: h100: 3 of 8 free" in msg
    assert "  small: h100: 2 of 2 free" in msg
    assert "  down: unreachable" in msg
    assert "  amp: configured chips: a100:4" in msg


async def test_filters_and_pin() -> None:
    sol = await FakeShims().solve(Request(chip="a100", chips=1, preferred_clusters=("a",)))
    assert [c.host for c in sol.candidates] == ["amp"]
    sol = await FakeShims().solve(Request(chips=0, host="big"))
    assert [c.host for c in sol.candidates] == ["big"]
    with pytest.raises(NoPlacementError, match="no host named 'nope'"):
        await FakeShims().solve(Request(host="nope"))
    sol = await FakeShims().solve(Request(chip="h100", chips=1, forbidden_clusters=("a",)))
    assert [c.host for c in sol.candidates] == ["big"]


async def test_an_unreachable_pinned_host_is_named_with_the_reason() -> None:
    with pytest.raises(NoPlacementError) as e:
        await FakeShims().solve(Request(chips=0, host="down"))
    assert str(e.value) == "host down is unreachable: ssh down: connection refused"
    assert "nothing fits" not in str(e.value)


async def test_more_chips_than_a_node_has_are_solved_as_nodes_of_one_cluster() -> None:
    cfg = parse_config("""
clusters: {pod: {}}
hosts:
  n1: {type: ssh, ssh: a, cluster: pod}
  n2: {type: ssh, ssh: b, cluster: pod}
  n3: {type: ssh, ssh: c, cluster: pod}
  lone: {type: ssh, ssh: d}
""")
    shims = FakeShims(
        {
            "n1": _host("h100", 4),
            "n2": _host("h100", 4, held=1),
            "n3": _host("h100", 4),
            "lone": _host("h100", 4),
        }
    )
    shims.inputs = BackendInputs(dict(cfg.hosts), cfg.clusters, {}, shims.inputs.ssh_pool)
    sol = await shims.solve(Request(chip="h100", chips=8), cfg)
    (plan,) = sol.candidates  # n2 has 3 free: n1 and n3 take 4 each; `lone` is no cluster
    assert (plan.host, plan.chips_per_node) == ("pod", 4)
    assert [n.host for n in plan.nodes] == ["n1", "n3"]
    # CPU-only on two nodes (`--nodes 2`): any two hosts of the cluster
    sol = await shims.solve(Request(nodes=2), cfg)
    assert [n.host for n in sol.candidates[0].nodes] == ["n1", "n2"]
    with pytest.raises(NoPlacementError, match="nothing fits 16 x h100"):
        await shims.solve(Request(chip="h100", chips=16), cfg)


async def test_a_session_skips_hosts_that_run_no_interactive_sessions() -> None:
    shims = FakeShims()
    sol = await shims.solve(Request(chip="h100", chips=1, interactive=True))
    assert [c.host for c in sol.candidates] == ["small", "big"]
    assert dict(sol.skipped)["vol1"] == "volcano hosts do not run interactive sessions"
    with pytest.raises(NoPlacementError) as e:
        await shims.solve(Request(host="vol1", interactive=True))
    assert "vol1: volcano hosts do not run interactive sessions" in str(e.value)


PREFS = parse_config(CFG_TEXT + "prefer: [b]\navoid: [a]\n")


async def test_the_config_s_prefer_goes_first_and_avoid_is_left_unless_asked_for() -> None:
    # b first, priority kept
    assert PREFS.ordered_hosts() == ["big", "down", "small", "amp", "vol1"]
    sol = await FakeShims().solve(Request(chip="h100", chips=1), PREFS)
    assert [c.host for c in sol.candidates] == ["big"]  # small (cluster a) avoided
    assert dict(sol.skipped)["small"].startswith("cluster a avoided (the config's avoid")
    asked = await FakeShims().solve(Request(chip="h100", chips=1, preferred_clusters=("a",)), PREFS)
    assert [c.host for c in asked.candidates] == ["small"]  # --cluster a: used after all
    pinned = await FakeShims().solve(Request(chip="h100", chips=1, host="small"), PREFS)
    assert [c.host for c in pinned.candidates] == ["small"]  # --host pins it too


async def test_an_unknown_cluster_flag_names_the_clusters_there_are() -> None:
    with pytest.raises(ConfigError, match=r"--cluster nope: no such cluster \(clusters: a, b\)"):
        await FakeShims().solve(Request(chips=0, preferred_clusters=("nope",)))
    with pytest.raises(ConfigError, match=r"--avoid-cluster zz: no such cluster"):
        await FakeShims().solve(Request(chips=0, forbidden_clusters=("zz",)))


async def test_cluster_flags_say_why_a_host_was_skipped() -> None:
    sol = await FakeShims().solve(Request(chip="h100", chips=1, forbidden_clusters=("a",)))
    assert dict(sol.skipped)["small"] == "cluster a avoided (--avoid-cluster)"
    only = await FakeShims().solve(Request(chip="h100", chips=1, preferred_clusters=("b",)))
    assert dict(only.skipped)["small"] == "cluster a, not b (--cluster)"
    assert dict(only.skipped)["down"] == "no cluster, not b (--cluster)"
