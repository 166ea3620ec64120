"""One `tcl ps` refresh of 200 runs on a SLURM host: SSH round trips, and time vs one squeue.

Starts the SLURM testbed (scripts/testbed/slurm-up.sh, its own ports and dir), queues 200 held
jobs (`sbatch --hold`), records 200 runs on them in a fresh state store, then times
`refresh_many` (what `tcl ps` runs) over a warm SSH connection and counts the remote commands
it sends; the baseline is one bare `squeue` over the same connection, measured in the same run.
Target: 1 round trip; the ratio says what the rest (status files, parsing, the store) costs.

    uv run python -m bench.slurm_ps [--runs 200] [--reps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from typing import Any

from bench._slurmlib import slurm_testbed, work_dir
from tcl.control.backends.slurm.handle import SlurmHandle, SlurmLogin
from tcl.control.config import parse_config
from tcl.control.lifecycle.refresh import refresh_many
from tcl.control.runrequest import RunRequest
from tcl.control.service import Control
from tcl.control.states import RunState
from tcl.control.store import Store
from tcl.control.transport.ssh import SshTarget


async def main(runs: int, reps: int) -> None:
    with slurm_testbed() as ssh_config:
        await _measure(ssh_config, runs, reps)


async def _measure(ssh_config: str, runs: int, reps: int) -> None:
    work = work_dir()
    cfg = parse_config(f"""
clusters: {{c: {{work: {work}}}}}
hosts:
  hpc: {{type: slurm, ssh: slurm-login, ssh_config_file: {ssh_config}, cluster: c}}
""")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TCL_STATE_DIR"] = tmp
        ctl = Control(cfg, Store(f"sqlite:///{tmp}/tcl.db"))
        target = SshTarget.from_config("hpc", cfg.hosts["hpc"])  # type: ignore[arg-type]
        try:
            loop = f"for i in $(seq {runs}); do sbatch --hold --parsable -p gpu --wrap true; done"
            res = await ctl.pool.run(target, ["sh", "-c", loop])
            job_ids = res.stdout.split()
            assert len(job_ids) == runs, res
            login = SlurmLogin.of(cfg.hosts["hpc"])  # type: ignore[arg-type]
            for i, job in enumerate(job_ids):
                run_id = f"bench-{i:04d}"
                ctl.store.create_run(run_id, "", RunRequest(argv=["true"]))
                ctl.store.set_state(run_id, RunState.QUEUED, message="held")
                handle = SlurmHandle(
                    host="hpc", login=login, job_id=job, run_dir=f"{work}/bench/{run_id}"
                )
                ctl.store.add_attempt(run_id, "hpc", "slurm", handle.model_dump(mode="json"))
                ctl.store.set_placement(run_id, "hpc", "slurm", None)
            listed = ctl.store.list_runs(include_final=False, limit=runs)
            calls = _count_calls(ctl)
            await refresh_many(ctl, listed)  # warm: the connection, imports
            times, trips, base = [], [], []
            for _ in range(reps):
                calls.clear()
                t0 = time.perf_counter()
                fresh = await refresh_many(ctl, listed)
                times.append(time.perf_counter() - t0)
                trips.append(len(calls))
                t0 = time.perf_counter()
                await ctl.pool.run(target, ["squeue", "-h"])
                base.append(time.perf_counter() - t0)
            states = {r.state for r in fresh}
            t, b = statistics.median(times), statistics.median(base)
            print(f"runs {runs}: states after refresh {sorted(s.value for s in states)}")
            print(f"ssh round trips per refresh: {sorted(set(trips))} (target 1)")
            print(
                f"refresh {t * 1000:.0f} ms vs one bare squeue {b * 1000:.0f} ms: ratio {t / b:.2f}"
            )
        finally:
            await ctl.pool.run(target, ["scancel", "--user", "root"], check=False)
            await ctl.aclose()


def _count_calls(ctl: Control) -> list[Any]:
    """Record every remote command the pool sends (one per SSH round trip)."""
    calls: list[Any] = []
    pool = ctl.pool
    real = pool.run

    async def counted(target: Any, argv: list[str], **kw: Any) -> Any:
        calls.append(argv[:1])
        return await real(target, argv, **kw)

    pool.run = counted  # type: ignore[method-assign]
    return calls


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()
    asyncio.run(main(a.runs, a.reps))
