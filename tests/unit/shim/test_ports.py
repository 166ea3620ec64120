"""Runner ports: a port the kernel offers again before the first runner bound it is not handed
out twice (parallel task starts on the process executor)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from tcl.shim.executors import ports


class _Kernel:
    """A socket whose kernel offers the ports of ``offers`` in turn."""

    offers: list[int] = []

    def __init__(self, *args: Any) -> None:
        self.port = _Kernel.offers.pop(0)

    def __enter__(self) -> _Kernel:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def bind(self, addr: tuple[str, int]) -> None:
        return None

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


def test_a_port_offered_again_is_not_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "_handed", {})
    monkeypatch.setattr(socket, "socket", _Kernel)
    _Kernel.offers = [40001, 40001, 40001, 40002, 40002, 40003]
    assert [ports.free_port() for _ in range(3)] == [40001, 40002, 40003]


def test_real_ports_are_distinct_and_bindable() -> None:
    handed = [ports.free_port() for _ in range(50)]
    assert len(set(handed)) == 50
    with socket.socket() as s:
        s.bind(("127.0.0.1", handed[-1]))
