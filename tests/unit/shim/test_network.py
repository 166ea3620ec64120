"""Network-mode choice."""

from __future__ import annotations

import pytest

from tcl.shim.api import NetworkMode
from tcl.shim.network import choose_network, is_whole_host

A, H, B = NetworkMode.AUTO, NetworkMode.HOST, NetworkMode.BRIDGE


@pytest.mark.parametrize(
    ("requested", "multinode", "whole", "want"),
    [
        (A, False, False, B),  # shares the host: bridge, ports published on loopback
        (A, False, True, H),  # takes the whole host
        (A, True, False, H),  # part of a multi-node job: collectives need the host network
        (H, False, False, H),
        (B, True, True, B),  # explicit choice honoured
    ],
)
def test_choose(requested: NetworkMode, multinode: bool, whole: bool, want: NetworkMode) -> None:
    assert choose_network(requested, multinode=multinode, whole_host=whole) is want


def test_whole_host() -> None:
    assert is_whole_host(8, 8, False)
    assert not is_whole_host(4, 8, False)
    assert is_whole_host(0, 0, True)
    assert not is_whole_host(0, 0, False)  # a CPU-only task on a CPU-only host shares it
