"""Pull progress and the stall timeout, against a scripted daemon stream.

The docker API is replaced at its seam (the APIClient's ``post``) by a scripted stream, because
these cases (a registry that keeps saying "Retrying" without moving bytes, progress fractions)
cannot be produced by the local dockerd without a registry. The real daemon is used for the
refused and silent registries in tests/integration/shim/test_docker_executor.py.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tcl.shim.errors import ImageError
from tcl.shim.executors.pull import pull_image


class FakeResponse:
    def __init__(
        self,
        status: int,
        lines: Iterator[dict[str, Any]] | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        self.status_code = status
        self._lines = lines or iter(())
        self._body = body or {}
        self.text = json.dumps(self._body)

    def __enter__(self) -> FakeResponse:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def json(self) -> dict[str, Any]:
        return self._body

    def iter_lines(self) -> Iterator[bytes]:
        for event in self._lines:
            yield json.dumps(event).encode()


class FakeAPI:
    base_url = "http+docker://localhost"
    api_version = "1.41"

    def __init__(self, response: FakeResponse) -> None:
        self.response = response
        self.calls: list[dict[str, Any]] = []

    def post(self, url: str, **kwargs: Any) -> FakeResponse:
        self.calls.append({"url": url, **kwargs})
        return self.response


def layer(layer_id: str, status: str, current: int = 0, total: int = 0) -> dict[str, Any]:
    detail = {"current": current, "total": total} if total else {}
    return {"id": layer_id, "status": status, "progressDetail": detail}


def test_progress_and_auth_header() -> None:
    events = [
        layer("a", "Pulling fs layer"),
        layer("b", "Pulling fs layer"),
        layer("a", "Downloading", 50, 100),
        layer("b", "Downloading", 100, 300),
        layer("a", "Pull complete"),
        layer("b", "Downloading", 300, 300),
        layer("b", "Pull complete"),
        {"status": "Status: Downloaded newer image"},
    ]
    api = FakeAPI(FakeResponse(200, iter(events)))
    seen: list[float] = []
    pull_image(
        api,
        "reg.example/img:2",
        {"username": "u", "password": "pw"},
        5,
        seen.append,
        threading.Event(),
    )
    assert seen == sorted(seen) and seen[-1] == 1.0
    assert seen[0] == 0.5 and seen[1] == 0.5  # 50/100, then (50 + 100)/400 is not reported
    call = api.calls[0]
    assert call["params"] == {"fromImage": "reg.example/img", "tag": "2"}
    auth = json.loads(base64.urlsafe_b64decode(call["headers"]["X-Registry-Auth"]))
    assert auth == {"username": "u", "password": "pw"}
    assert call["timeout"] == (5, 5)  # the per-read timeout is the stall timeout


def test_talking_without_progress_is_a_stall() -> None:
    def retrying() -> Iterator[dict[str, Any]]:
        yield layer("a", "Downloading", 10, 100)
        for _ in range(3000):  # a minute of talk: only the stall check ends it early
            time.sleep(0.02)
            yield layer("a", "Retrying in 5 seconds")

    api = FakeAPI(FakeResponse(200, retrying()))
    with pytest.raises(ImageError, match=r"no progress for 0.2 s"):
        pull_image(api, "img", None, 0.2, lambda _: None, threading.Event())


def test_slow_but_moving_pull_is_not_a_stall() -> None:
    # 0.6 s in all, longer than the 0.5 s stall timeout, but progress every 0.04 s: a gap a
    # loaded machine would have to stretch twelvefold to look like a stall
    def slow() -> Iterator[dict[str, Any]]:
        for i in range(1, 16):
            time.sleep(0.04)
            yield layer("a", "Downloading", i, 20)
        yield layer("a", "Pull complete")

    pull_image(
        FakeAPI(FakeResponse(200, slow())), "img", None, 0.5, lambda _: None, threading.Event()
    )


def test_errors_are_image_errors() -> None:
    api = FakeAPI(FakeResponse(200, iter([{"error": "manifest unknown"}])))
    with pytest.raises(ImageError, match="manifest unknown"):
        pull_image(api, "img:x", None, 5, lambda _: None, threading.Event())
    api = FakeAPI(FakeResponse(404, body={"message": "pull access denied for img"}))
    with pytest.raises(ImageError, match="not found: pull access denied"):
        pull_image(api, "img:x", None, 5, lambda _: None, threading.Event())
    api = FakeAPI(FakeResponse(500, body={"message": "connection refused"}))
    with pytest.raises(ImageError, match="connection refused"):
        pull_image(api, "img:x", None, 5, lambda _: None, threading.Event())
