"""One TLS context for every HTTP client of tcl's agents.

httpx builds a TLS context for each client it makes (loading the CA bundle: ~30 ms of CPU),
even for the plain-HTTP, loopback and SSH-tunnelled URLs the runner and shim clients speak. A
controller makes a runner client per run, a sweep several per second: that was 14 % of a busy
daemon's CPU. The clients share this one instead (made on first use, the same as httpx's own).
"""

from __future__ import annotations

import functools
import ssl


@functools.cache
def shared_context() -> ssl.SSLContext:
    import httpx

    return httpx.create_ssl_context()
