"""Allocation: deterministic, all-or-nothing, topology-aware, safe under concurrency."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tcl.shim.allocator import Allocator, Request
from tcl.shim.errors import BadRequest, NoCapacity
from tcl.shim.inventory import Topology, parse_topology

DATA = Path(__file__).parent / "data"


def test_lowest_free_indices_first() -> None:
    a = Allocator(range(8))
    assert a.allocate("t1", 2) == [0, 1]
    assert a.allocate("t2", 3) == [2, 3, 4]
    a.release("t1")
    assert a.allocate("t3", 1) == [0]
    assert a.free() == [1, 5, 6, 7]


def test_all_or_nothing_names_what_is_free() -> None:
    a = Allocator(range(4))
    a.allocate("t1", 3)
    with pytest.raises(NoCapacity) as e:
        a.allocate("t2", 2)
    assert e.value.free == [3]
    assert "free: [3]" in e.value.detail
    assert a.held() == {0: "t1", 1: "t1", 2: "t1"}  # nothing was taken by the refused request


def test_explicit_indices_and_all() -> None:
    a = Allocator(range(4))
    assert a.allocate("t1", [3, 1]) == [1, 3]
    with pytest.raises(NoCapacity, match=r"\[1\] not free"):
        a.allocate("t2", [0, 1])
    with pytest.raises(NoCapacity, match="all 4"):
        a.allocate("t3", "all")
    with pytest.raises(BadRequest, match="index"):
        a.allocate("t4", [9])
    a.release("t1")
    assert a.allocate("t5", "all") == [0, 1, 2, 3]


def test_busy_outside_counts_as_taken() -> None:
    a = Allocator(range(4))
    assert a.allocate("t1", 2, unavailable={0}) == [1, 2]
    with pytest.raises(NoCapacity):
        a.allocate("t2", 2, unavailable={3})


def test_prefers_a_shared_nvlink_domain() -> None:
    a = Allocator(range(4), parse_topology((DATA / "topo_a100x4_pairs.txt").read_text()))
    assert a.allocate("t1", 1) == [0]
    # Lowest free would be [1, 2]; the NVLink pair 2-3 holds the request whole.
    assert a.allocate("t2", 2) == [2, 3]
    assert a.allocate("t3", 1) == [1]


def test_prefers_a_shared_numa_node() -> None:
    a = Allocator(range(4), parse_topology((DATA / "topo_l4x4_pcie.txt").read_text()))
    a.allocate("t1", [0])
    assert a.allocate("t2", 2) == [2, 3]


def test_falls_back_to_lowest_free_across_domains() -> None:
    a = Allocator(range(4), Topology(nvlink_groups=[frozenset({0, 1}), frozenset({2, 3})]))
    a.allocate("t1", [0])
    a.allocate("t2", [2])
    assert a.allocate("t3", 2) == [1, 3]


requests = st.one_of(
    st.integers(0, 4),
    st.just("all"),
    st.lists(st.integers(0, 7), min_size=1, max_size=3, unique=True),
)


def _run_sequential(reqs: list[Request]) -> list[list[int] | None]:
    a = Allocator(range(8))
    out: list[list[int] | None] = []
    for i, r in enumerate(reqs):
        try:
            out.append(a.allocate(f"t{i}", r))
        except NoCapacity:
            out.append(None)
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(requests, min_size=1, max_size=24))
def test_deterministic(reqs: list[Request]) -> None:
    assert _run_sequential(reqs) == _run_sequential(reqs)


@settings(max_examples=40, deadline=None)
@given(st.lists(requests, min_size=2, max_size=24))
def test_concurrent_requests_never_share_an_accelerator(reqs: list[Request]) -> None:
    a = Allocator(range(8))
    granted: dict[str, list[int]] = {}
    refused: list[str] = []
    barrier = threading.Barrier(len(reqs))

    def ask(i: int, r: Request) -> None:
        barrier.wait()
        try:
            granted[f"t{i}"] = a.allocate(f"t{i}", r)
        except NoCapacity:
            refused.append(f"t{i}")

    threads = [threading.Thread(target=ask, args=(i, r)) for i, r in enumerate(reqs)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, to provoke races
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    flat = [i for got in granted.values() for i in got]
    assert len(flat) == len(set(flat)), f"an accelerator was granted twice: {granted}"
    assert len(granted) + len(refused) == len(reqs)
    for i, r in enumerate(reqs):  # all or nothing: a grant is exactly what was asked
        got = granted.get(f"t{i}")
        if got is not None:
            want = 8 if r == "all" else (len(r) if isinstance(r, list) else r)
            assert len(got) == want
    assert {i: t for t, got in granted.items() for i in got} == a.held()
