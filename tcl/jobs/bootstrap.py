"""What `python -m tcl.jobs.launch` does: status + heartbeat, signals, resume, outcome.

0. With more than one node (`TCL_NODES`), join JAX's distributed runtime (tcl.jobs.distributed)
   before anything touches a device.
1. Build the config (YAML ⊕ overrides ⊕ env overrides); resolve `per_device_batch_size: -1`
   (every process probes its own node; all take the smallest size found).
2. Write metadata.json `running` (process 0; process N writes metadata.node-N.json) and start
   the 30 s heartbeat.
3. SIGTERM/SIGINT: ask the job to stop; a trainer checkpoints and raises JobPreempted; a job
   that cannot checkpoint is interrupted at once. Status `preempted`, exit PREEMPTED_EXIT.
4. If this run (same run id) already has a `latest` checkpoint, resume from it (`--fresh`
   deletes this run's checkpoints first); else `--restore` if given; else start fresh.
5. `completed` (exit 0) or `failed` (exit 1, traceback on stderr).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import Any

from omegaconf import DictConfig, OmegaConf

from tcl.jobs import batchsize, distributed, mark
from tcl.jobs.config import configuration, schema_of
from tcl.jobs.errors import ConfigError, JobPreempted, JobsError
from tcl.jobs.job import BasicJob, RestoreableJob, is_done
from tcl.jobs.registry import get_job
from tcl.jobs.run import load_config, make_job
from tcl.jobs.spec import ExecutionSpec
from tcl.jobs.status import Heartbeat, RunStatus, StatusFile, status_file_name
from tcl.runner.metricline import Phase

log = logging.getLogger("tcl.jobs.launch")
PREEMPTED_EXIT = 143  # 128 + SIGTERM, what a scheduler expects from a preempted job
FAILED_EXIT = 1
BAD_INPUT_EXIT = 2
RUN_ID_ENV = "TCL_RUN_ID"


@dataclasses.dataclass(frozen=True)
class LaunchOptions:
    key: str
    config_path: Path | None
    out_dir: Path
    overrides: tuple[str, ...] = ()
    run_id: str | None = None
    name: str | None = None
    project: str = "default"
    group: str = "default"
    restore: str | None = None
    fresh: bool = False
    probe: bool = False  # a batch-size probe: a few steps, no checkpoints


def default_run_id() -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    slurm = os.environ.get("SLURM_JOB_ID")
    return f"{stamp}-{slurm}" if slurm else f"{stamp}-{os.getpid()}"


class _Stopper:
    """SIGTERM/SIGINT → ask the job to stop (or interrupt a job that cannot checkpoint)."""

    def __init__(self) -> None:
        self.job: BasicJob[Any] | None = None
        self.requested = False
        self._old: dict[int, Any] = {}

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)

    def attach(self, job: BasicJob[Any]) -> None:
        self.job = job
        if self.requested:
            job.stop_event.set()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        print(f"tcl.jobs: received signal {signum}, stopping", file=sys.stderr, flush=True)
        self.requested = True
        if self.job is not None and getattr(self.job, "COOPERATIVE_STOP", False):
            self.job.stop_event.set()  # it checkpoints at the next step, then raises
            return
        raise JobPreempted(None)


def _probe_overrides(steps: int) -> list[str]:
    return [
        f"training/total_steps={steps}",
        "logging/checkpoint_at_end=false",
        "logging/checkpoint_interval=0",
        "logging/validation_interval=0",
    ]


def _model_key(key: str, full: DictConfig) -> str:
    """The model's settings (every config path its MODEL declares) as one stable string."""
    model_cls = getattr(get_job(key), "MODEL", None)
    paths = sorted(schema_of([model_cls])) if model_cls is not None else []
    values = {p: OmegaConf.select(full, p.replace("/", ".")) for p in paths}
    name = getattr(model_cls, "__qualname__", None)
    return json.dumps({"model": name, **values}, sort_keys=True, default=str)


def _resolve_batch_size(
    opts: LaunchOptions, full: DictConfig, overrides: list[str], topology: distributed.Topology
) -> list[str]:
    training = full.get("training")
    if training is None or training.get("per_device_batch_size") != -1:
        return overrides
    # Not jax.devices() here: this process must not hold the devices while its probes run.
    chip, devices = batchsize.describe_devices()
    model = _model_key(opts.key, full)
    extra = {
        "grad_accum_steps": training.get("grad_accum_steps", 1),
        "model_parallel": full.get("mesh", {}).get("model_parallel", 1),
    }
    key = batchsize.cache_key(model, chip, devices, extra)
    probe = batchsize.subprocess_probe(opts.key, opts.config_path, list(opts.overrides))
    size, from_cache = batchsize.resolve(key, probe, chip)
    if topology.num_processes > 1:
        # Each node searched (or cached) on its own devices; one batch for all: the smallest.
        import numpy as np
        from jax.experimental import multihost_utils

        size = int(np.min(multihost_utils.process_allgather(np.int32(size))))
    print(
        f"tcl.jobs: per_device_batch_size = {size} ({'cached' if from_cache else 'searched'})",
        flush=True,
    )
    return [*overrides, f"training/per_device_batch_size={size}"]


def launch(opts: LaunchOptions) -> int:
    """Run one job under the launcher's protocol; returns the process exit code."""
    topology = distributed.initialize()
    mark(Phase.JAX_READY)
    overrides = list(opts.overrides)
    env_bs = os.environ.get(batchsize.BATCH_SIZE_ENV)
    if env_bs:
        if not env_bs.strip().isdigit():
            raise ConfigError(
                f"${batchsize.BATCH_SIZE_ENV}={env_bs!r} is not a positive integer",
                key="training/per_device_batch_size",
            )
        overrides.append(f"training/per_device_batch_size={int(env_bs)}")
    if opts.probe:
        overrides += _probe_overrides(batchsize.PROBE_STEPS)
    full, _ = load_config(opts.key, opts.config_path, overrides)
    overrides = _resolve_batch_size(opts, full, overrides, topology)
    full, explicit = load_config(opts.key, opts.config_path, overrides)

    run_id = opts.run_id or os.environ.get(RUN_ID_ENV) or default_run_id()
    spec = ExecutionSpec.local(
        opts.out_dir,
        opts.name or opts.key.replace("/", "-"),
        opts.project,
        opts.group,
        run_id=run_id,
    )
    status = StatusFile(spec.status_dir / status_file_name(topology.process_id))
    status.set(RunStatus.RUNNING, run_id=run_id, key=opts.key, attempt_started_at=time.time())
    heartbeat = Heartbeat(status)
    heartbeat.start()
    stopper = _Stopper()
    stopper.install()
    try:
        try:
            restore = _pick_restore(opts, spec, topology)
            if restore is not None:
                print(f"tcl.jobs: restoring from {restore}", flush=True)
            job, cfg = make_job(opts.key, spec, full, explicit, restore)
        except JobPreempted:
            raise
        except JobsError as e:  # bad input (no such checkpoint, ...): one line, exit 2
            heartbeat.stop()
            status.set(RunStatus.FAILED, exit_code=BAD_INPUT_EXIT, error=str(e))
            print(f"error: {e}", file=sys.stderr, flush=True)
            return BAD_INPUT_EXIT
        stopper.attach(job)
        with configuration(cfg):
            if not is_done(job):
                job()
    except JobPreempted as e:
        heartbeat.stop()
        status.set(RunStatus.PREEMPTED, exit_code=PREEMPTED_EXIT, checkpoint=e.checkpoint)
        print(f"tcl.jobs: preempted (checkpoint: {e.checkpoint})", file=sys.stderr, flush=True)
        return PREEMPTED_EXIT
    except BaseException as e:
        heartbeat.stop()
        traceback.print_exc()
        status.set(RunStatus.FAILED, exit_code=FAILED_EXIT, error=f"{type(e).__name__}: {e}")
        return FAILED_EXIT
    finally:
        stopper.uninstall()
    heartbeat.stop()
    status.set(RunStatus.COMPLETED, exit_code=0)
    return 0


def _pick_restore(
    opts: LaunchOptions, spec: ExecutionSpec, topology: distributed.Topology
) -> str | None:
    job_cls = get_job(opts.key)
    if not issubclass(job_cls, RestoreableJob):
        return opts.restore
    scope = spec.checkpoints_dir / spec.scope
    if opts.fresh:
        if topology.main_process and scope.exists():
            shutil.rmtree(scope)
        if topology.num_processes > 1:
            # No process may read `latest` before process 0 deleted it: all must start alike.
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("tcl.jobs.fresh")
    latest = job_cls.latest(spec)
    if latest is not None:
        return str(Path(spec.scope) / latest)
    return opts.restore
