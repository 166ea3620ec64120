"""Helpers for tests that drive the emulator with the real ``google.cloud.tpu_v2`` client."""

from __future__ import annotations

from typing import Any

from google.api_core import future
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import tpu_v2

# The client's default LRO polling starts at 1 s; the emulator is quicker than that.
FAST_POLLING = future.polling.DEFAULT_POLLING.with_delay(initial=0.05, maximum=0.2)


def client(url: str) -> tpu_v2.TpuClient:
    """A REST client for the emulator at ``url``, anonymous (as tcl's backend makes it)."""
    return tpu_v2.TpuClient(
        transport="rest",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options=ClientOptions(api_endpoint=url),
    )


def wait(op: Any, timeout_s: float = 60.0) -> Any:
    """``op.result()`` with quick polling."""
    return op.result(timeout=timeout_s, polling=FAST_POLLING.with_timeout(timeout_s))
