"""Row 2, isolation: two process-executor tasks on one GPU host each see only their own GPU.

A real shim (process executor, real NVIDIA discovery) runs two tasks at once, through the same
typed clients the control plane uses. On a host with two GPUs or more each asks for one; on a
one-GPU host the second asks for none. Each task's job prints what it was given
(``CUDA_VISIBLE_DEVICES``) and what JAX and the CUDA runtime then show it (device count,
platform, the PCI bus id of its device 0, read through CuPy where installed), and that bus id
must be the one nvidia-smi gives for the GPU the shim allocated. While both run, one more task
asking for a GPU must be refused (``no_capacity``) when none is free.

    python -m bench.gpucheck.isolation
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
from typing import Any

from bench._shimlib import ShimProcess
from bench.gpucheck.report import Outcome, RowResult, run_row
from tcl.runner.api import JobSpec, LogStream
from tcl.runner.client import RunnerClient
from tcl.shim.api import ExecutorKind, TaskSpec, TaskStatus
from tcl.shim.client import ShimClient
from tcl.shim.errors import NoCapacity, ShimError

RUNNER_BIN_ENV = "TCL_GPUCHECK_RUNNER_BIN"  # scripts/gpu-check.sh's runner, where none is installed
PROBE_MARK = "GPUCHECK_TASK "
# The job: what it was given and what it sees; it stays a few seconds so the tasks overlap.
_PROBE = f"""
import json, os, time
seen = {{"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}}
try:
    import jax
    devices = jax.devices()
    seen["platform"] = devices[0].platform
    seen["devices"] = len(devices) if devices[0].platform == "gpu" else 0
    seen["kinds"] = sorted({{d.device_kind for d in devices}})
except Exception as e:
    seen["jax_error"] = repr(e)[:200]
try:
    import cupy
    count = cupy.cuda.runtime.getDeviceCount()
    seen["pci_bus_id"] = cupy.cuda.Device(0).pci_bus_id if count else None
except Exception as e:
    seen["cupy_error"] = repr(e)[:200]
print({PROBE_MARK!r} + json.dumps(seen), flush=True)
time.sleep(3)
"""


def bus_ids() -> dict[int, str]:
    """nvidia-smi's PCI bus id per GPU index, in CUDA's short form (domain of 4 hex digits)."""
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    ids = {}
    for line in out.splitlines():
        index, bus = (c.strip() for c in line.split(","))
        ids[int(index)] = bus[-12:].upper()  # 00000000:19:00.0 -> 0000:19:00.0
    return ids


async def run_task(c: ShimClient, task_id: str, gpus: int) -> dict[str, Any]:
    """Submit a task asking for `gpus`, run the probe job in it, return what the job saw."""
    await c.submit_task(TaskSpec(id=task_id, accelerators=gpus, executor=ExecutorKind.PROCESS))
    while (info := await c.get_task(task_id)).status is not TaskStatus.RUNNING:
        if info.status is TaskStatus.TERMINATED:
            raise RuntimeError(f"task {task_id} ended before running: {info.message}")
        await asyncio.sleep(0.05)
    assert info.ports.runner and info.runner_token
    lines: list[str] = []
    async with RunnerClient(f"http://127.0.0.1:{info.ports.runner}", info.runner_token) as r:
        await r.wait_healthy()
        await r.submit(JobSpec(run_id=task_id, argv=[sys.executable, "-c", _PROBE]))
        await r.run()
        page = await r.events(0, wait_s=30)
        while True:
            lines += [e.data or "" for e in page.events if e.stream is LogStream.STDOUT]
            if page.state.is_final and not page.more:
                break
            page = await r.events(page.next, wait_s=30)
    seen = [ln for ln in "".join(lines).splitlines() if ln.startswith(PROBE_MARK)]
    if not seen:
        raise RuntimeError(f"task {task_id}'s job printed no report: {''.join(lines)[-300:]!r}")
    report: dict[str, Any] = json.loads(seen[-1][len(PROBE_MARK) :])
    report["allocated"] = info.accelerators
    report["exit_code"] = page.exit_code
    return report


async def refused_when_full(c: ShimClient) -> bool:
    try:
        await c.submit_task(TaskSpec(id="extra", accelerators=1, executor=ExecutorKind.PROCESS))
    except NoCapacity:
        return True
    await c.terminate_task("extra", timeout_s=10)
    await c.remove_task("extra")
    return False


def verdict(report: dict[str, Any], gpus: int, ids: dict[int, str]) -> list[str]:
    """What is wrong with what one task saw, given it asked for `gpus` (0 or 1)."""
    wrong = []
    given = ",".join(str(i) for i in report["allocated"])
    if report.get("cuda_visible_devices") != given:
        wrong.append(f"CUDA_VISIBLE_DEVICES {report.get('cuda_visible_devices')!r} != {given!r}")
    if report.get("devices") != gpus:
        wrong.append(f"JAX shows {report.get('devices')} GPUs, not {gpus} ({report})")
    bus = report.get("pci_bus_id")
    if gpus and bus is not None and bus.upper() != ids.get(report["allocated"][0]):
        wrong.append(f"CUDA device 0 is {bus}, the allocated GPU is {ids}")
    if report.get("exit_code") != 0:
        wrong.append(f"job exited {report.get('exit_code')}")
    return wrong


async def check_async() -> RowResult:
    if shutil.which("nvidia-smi") is None:
        return RowResult("isolation", Outcome.SKIPPED, "no nvidia-smi here (no NVIDIA GPU)")
    runner_bin = os.environ.get(RUNNER_BIN_ENV)
    shim = ShimProcess(
        "--executor",
        "process",
        "--reconcile-interval-s",
        "0.5",
        *(["--runner-bin", runner_bin] if runner_bin else []),
    )
    try:
        await shim.wait()
        async with shim.client() as c:
            host = await c.host()
            n = len([a for a in host.accelerators if not a.fake])
            if n == 0:
                return RowResult("isolation", Outcome.FAILED, "the shim found no GPU")
            asks = [1, 1] if n >= 2 else [1, 0]
            running = [asyncio.create_task(run_task(c, f"task-{i}", g)) for i, g in enumerate(asks)]
            refused = None
            if n <= 2:  # every GPU is asked for: one more must be refused while they run
                await asyncio.sleep(1.0)
                refused = await refused_when_full(c)
            try:
                reports = await asyncio.gather(*running)
            finally:  # runners outlive their shim by design: end them whatever happened
                for t in running:
                    t.cancel()
                for i in range(len(asks)):
                    with contextlib.suppress(ShimError):
                        await c.terminate_task(f"task-{i}", timeout_s=10)
                        await c.remove_task(f"task-{i}")
    finally:
        shim.close()
    ids = bus_ids()
    wrong = [
        f"task {i}: {w}"
        for i, (r, g) in enumerate(zip(reports, asks, strict=True))
        for w in verdict(r, g, ids)
    ]
    if refused is False:
        wrong.append("a third GPU request was not refused while every GPU was held")
    summary = "; ".join(
        f"task {i} asked {g}: CUDA_VISIBLE_DEVICES={r.get('cuda_visible_devices')!r}, "
        f"JAX {r.get('devices')} GPU ({r.get('platform')}), bus {r.get('pci_bus_id', '-')}"
        for i, (r, g) in enumerate(zip(reports, asks, strict=True))
    )
    if refused is not None:
        summary += f"; extra GPU request {'refused' if refused else 'NOT refused'}"
    figures = {"gpus": n, "tasks": reports, "extra_refused": refused, "wrong": wrong}
    outcome = Outcome.OK if not wrong else Outcome.BELOW_GOAL
    return RowResult(
        "isolation", outcome, summary + ("" if not wrong else "; " + wrong[0]), figures
    )


def check() -> RowResult:
    return asyncio.run(check_async())


if __name__ == "__main__":
    sys.exit(run_row("isolation", check))
