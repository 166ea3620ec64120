"""100 tasks submitted at once to a shim with fake accelerators (h100:8, process executor):
no accelerator may be granted twice and every ``no_capacity`` must be answered in < 50 ms.
Baseline: 100 concurrent healthchecks against the same shim in the same run.

Two latencies per request: the shim's own answer time (its ``Server-Timing: app;dur=`` header:
from the request reaching the app to the response starting) and the client-perceived time,
which on a small machine is dominated by 100 HTTP exchanges queueing for the same cores.

    uv run python bench/shim_concurrent_submit.py [TASKS]
    BENCH_RUNNER=/path/to/stand-in uv run python bench/shim_concurrent_submit.py  # isolate the
        shim from the granted tasks' runner start-up (any executable that stays up)
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

from bench._shimlib import TOKEN, ShimProcess
from tcl.shim.api import TaskSpec
from tcl.shim.client import ShimClient
from tcl.shim.errors import NoCapacity

RUNNER = os.environ.get("BENCH_RUNNER") or str(Path(sys.executable).with_name("tcl-runner"))


async def timed(
    http: httpx.AsyncClient, method: str, path: str, body: dict[str, object] | None = None
) -> tuple[float, float, httpx.Response]:
    """(client-perceived s, shim answer s, response)."""
    t0 = time.perf_counter()
    resp = await http.request(method, path, json=body)
    client_s = time.perf_counter() - t0
    timing = resp.headers.get("server-timing", "app;dur=nan")
    return client_s, float(timing.split("dur=")[1]) / 1000, resp


def summary(name: str, lat_s: list[float]) -> str:
    q = statistics.quantiles(lat_s, n=100) if len(lat_s) > 1 else lat_s * 99
    return (
        f"{name}: n={len(lat_s)} p50 {statistics.median(lat_s) * 1000:.1f} ms, "
        f"p99 {q[98] * 1000:.1f} ms, max {max(lat_s) * 1000:.1f} ms"
    )


async def main(n: int) -> None:
    shim = ShimProcess(
        "--executor", "process", "--runner-bin", RUNNER, "--fake-accelerators", "h100:8"
    )
    await shim.wait()
    try:
        limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
        async with (
            shim.client() as c,
            httpx.AsyncClient(
                base_url=shim.url,
                headers={"Authorization": f"Bearer {TOKEN}"},
                limits=limits,
                timeout=30,
                trust_env=False,
            ) as http,
        ):
            await asyncio.gather(*(http.get("/api/healthcheck") for _ in range(n)))  # connect
            health = await asyncio.gather(
                *(timed(http, "GET", "/api/healthcheck") for _ in range(n))
            )
            sizes = [1 + i % 3 for i in range(n)]
            results = await asyncio.gather(
                *(
                    timed(
                        http,
                        "POST",
                        "/api/tasks",
                        TaskSpec(id=f"cc-{i}", accelerators=sizes[i]).model_dump(mode="json"),
                    )
                    for i in range(n)
                )
            )
            granted: dict[str, list[int]] = {}
            refused_client: list[float] = []
            refused_app: list[float] = []
            for i, (client_s, app_s, resp) in enumerate(results):
                if resp.status_code == 409:
                    assert resp.json()["error"] == NoCapacity.code
                    refused_client.append(client_s)
                    refused_app.append(app_s)
                else:
                    assert resp.status_code == 201, resp.text
                    granted[f"cc-{i}"] = resp.json()["accelerators"]
                    assert len(granted[f"cc-{i}"]) == sizes[i]
            flat = [a for acc in granted.values() for a in acc]
            assert len(flat) == len(set(flat)), f"an accelerator was granted twice: {granted}"
            # Then one at a time (the host is full): each refusal's own latency, no queueing.
            sequential: list[float] = []
            for i in range(n):
                client_s, _, resp = await timed(
                    http,
                    "POST",
                    "/api/tasks",
                    TaskSpec(id=f"seq-{i}", accelerators=1).model_dump(mode="json"),
                )
                assert resp.status_code == 409, resp.text
                sequential.append(client_s)
            host = await c.host()
            assert {a.index: a.task_id for a in host.accelerators if a.task_id} == {
                a: t for t, acc in granted.items() for a in acc
            }
            await cleanup(c, list(granted))
    finally:
        shim.close()
    print(
        f"granted {len(granted)} tasks holding {sorted(flat)}; refused {len(refused_client)}; "
        "no accelerator granted twice"
    )
    print(summary("no_capacity, shim answer time ", refused_app))
    print(summary("healthcheck, shim answer time ", [a for _, a, _ in health]))
    print(summary("no_capacity, client-perceived ", refused_client))
    print(summary("healthcheck, client-perceived ", [c for c, _, _ in health]))
    print(summary("no_capacity, one at a time, client-perceived", sequential))
    ratio = statistics.median(refused_client) / statistics.median([c for c, _, _ in health])
    print(f"ratio median client-perceived no_capacity / healthcheck = {ratio:.2f}")
    print(
        f"every no_capacity answered by the shim in < 50 ms: {max(refused_app) < 0.05} "
        f"(max {max(refused_app) * 1000:.1f} ms, under 100-way concurrency); one at a time: "
        f"{max(sequential) < 0.05} (max {max(sequential) * 1000:.1f} ms)"
    )


async def cleanup(c: ShimClient, task_ids: list[str]) -> None:
    await asyncio.gather(*(c.terminate_task(t, timeout_s=5) for t in task_ids))
    await asyncio.gather(*(c.remove_task(t) for t in task_ids))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100))
