"""The orphan sweep on a SLURM cluster (the real testbed): this user's jobs named
``tcl-<run>-<attempt>`` that no live attempt names are cancelled; the job a live attempt names,
a job of a run this store does not know and a job tcl did not name are left alone."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tcl.control.backends.slurm.handle import SlurmHandle, SlurmLogin
from tcl.control.backends.slurm.jobnames import job_name
from tcl.control.config import SlurmHost, load_config
from tcl.control.lifecycle.orphans import sweep_host
from tcl.control.runrequest import RunRequest
from tcl.control.service import Control
from tcl.control.states import AttemptCause, RunState
from tcl.control.store import Store
from tests.integration.slurm.test_e2e_slurm import _config
from tests.testbed import SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm]


@pytest.fixture
def ctl(
    slurm_cluster: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Control]:
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path / "state"))
    config = tmp_path / "config.yaml"
    work = slurm_cluster.base / "jobs" / f"work-{uuid.uuid4().hex[:8]}"
    config.write_text(_config(slurm_cluster, work))
    yield Control(load_config(config), Store(f"sqlite:///{tmp_path / 'tcl.db'}"))


def test_the_sweep_cancels_the_slurm_jobs_no_live_attempt_names(
    slurm_cluster: SlurmCluster, ctl: Control
) -> None:
    tag = uuid.uuid4().hex[:6]
    run, requeued = f"orph-{tag}", f"requeued-{tag}"

    def sbatch(name: str) -> str:
        res = slurm_cluster.ssh(f"sbatch --parsable --job-name={name} --wrap 'sleep 300'")
        job_id = res.stdout.strip().split(";")[0]
        assert job_id.isdigit(), res.stderr
        return job_id

    def handle(job_id: str) -> dict[str, object]:
        cfg = ctl.cfg.hosts["hpc"]
        assert isinstance(cfg, SlurmHost)
        h = SlurmHandle(host="hpc", login=SlurmLogin.of(cfg), job_id=job_id, run_dir="/nowhere")
        return h.model_dump(mode="json")

    jobs = {
        "live": sbatch(job_name(run, 0)),  # its attempt 0 is live and names it
        "stray": sbatch(job_name(run, 1)),  # no attempt 1: a placement that died after sbatch
        "ended": sbatch(job_name(run, 2)),  # its attempt ended, given up on (cause infra)
        "requeued": sbatch(job_name(requeued, 0)),  # attempt 0 ended; attempt 1 is this job
        "stranger": sbatch(job_name(f"not-ours-{tag}", 0)),  # a run this store does not know
        "untouched": sbatch(f"someone-{tag}"),  # not a name tcl gives
    }
    try:
        store = ctl.store
        store.create_run(run, "", RunRequest(argv=["sleep"]))
        store.add_attempt(run, "hpc", "slurm", handle(jobs["live"]))
        store.add_attempt(run, "hpc", "slurm", handle("1"))  # attempt 1 names another job
        store.add_attempt(run, "hpc", "slurm", handle(jobs["ended"]))
        store.update_attempt(run, 2, state=RunState.TERMINATED, cause=AttemptCause.INFRA)
        store.create_run(requeued, "", RunRequest(argv=["sleep"]))
        store.add_attempt(requeued, "hpc", "slurm", handle(jobs["requeued"]))
        store.update_attempt(requeued, 0, state=RunState.TERMINATED, cause=AttemptCause.PREEMPTED)
        store.add_attempt(requeued, "hpc", "slurm", handle(jobs["requeued"]))

        async def sweeps() -> tuple[list[str], list[str], list[str]]:
            try:  # one loop: the pooled SSH connection to the login node lives in it
                first = await sweep_host(ctl, "slurm", "hpc", 0.0)
                deadline = time.monotonic() + 60
                while True:
                    out = await asyncio.to_thread(slurm_cluster.ssh, "squeue --me -h -o %i")
                    listed = out.stdout.split()
                    if jobs["stray"] not in listed and jobs["ended"] not in listed:
                        break
                    assert time.monotonic() < deadline, listed
                    await asyncio.sleep(0.5)
                return first, listed, await sweep_host(ctl, "slurm", "hpc", 0.0)
            finally:
                await ctl.aclose()

        ended, listed, again = asyncio.run(sweeps())
        assert sorted(ended) == sorted([jobs["stray"], jobs["ended"]])
        kept = ("live", "requeued", "stranger", "untouched")
        assert {jobs[k] for k in kept} <= set(listed)
        assert again == []  # a second sweep finds nothing more to end
    finally:
        slurm_cluster.ssh("scancel " + " ".join(jobs.values()))
