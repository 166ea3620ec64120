"""The batch script, generated from typed data: every value quoted, argv lists only.

Nothing from the config is pasted into shell code: option values go through ``shlex.quote`` on
their ``#SBATCH`` lines (values with a newline are refused), and the per-task shell is a fixed
string whose inputs arrive as positional arguments.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from tcl.control.errors import TclError
from tcl.runner.nodeenv import COORDINATOR_PORT_BASE, COORDINATOR_PORT_SPAN

CONTAINER_MOUNT = "/mnt"  # where the cluster's work dir appears inside a container

# Rank 0's address from its NodeAddr (node names need not resolve; research note A4).
_COORDINATOR = f"""\
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
addr=$(scontrol show node "$first" -o | tr ' ' '\\n' | sed -n 's/^NodeAddr=//p')
port=$((SLURM_JOB_ID % {COORDINATOR_PORT_SPAN} + {COORDINATOR_PORT_BASE}))
export TCL_COORDINATOR="${{addr:-$first}}:$port"
export JAX_COORDINATOR_ADDRESS="$TCL_COORDINATOR"
"""

# One task per node. $1 the attempt dir outside any container, $2 the same inside it; then the
# runner's argv. Every node reads the run's one spec: its runner takes its rank and the node
# count from SLURM_PROCID/SLURM_NTASKS, the attempt from SLURM_RESTART_COUNT and the
# coordinator from TCL_COORDINATOR (tcl.runner.cluster); each gets a state dir of its own.
TASK_SHELL = r"""set -eu
mkdir -p "$1/n$SLURM_PROCID"
di="$2/n$SLURM_PROCID"
shift 2
exec "$@" --state-dir "$di"
"""


@dataclass(frozen=True)
class BatchScript:
    """Everything the script says, as data."""

    job_name: str
    nodes: int
    partition: str | None
    gres: str | None  # per node, e.g. "gpu:h100:4"
    run_dir: str  # outside any container
    spec: str  # the run's spec file
    code: str | None  # the code tarball
    runner: Sequence[str]  # argv of the runner's program, e.g. [".../bin/tcl-runner"]
    time_s: float | None = None
    account: str | None = None
    qos: str | None = None
    mem: str | None = None
    exclude: Sequence[str] = ()
    signal_before_s: int = 120
    container: str = "none"
    container_image: str | None = None
    work: str = ""  # the cluster's work dir (bound into a container)
    extra_env: Sequence[tuple[str, str]] = field(default_factory=tuple)
    serve: str | None = None  # HOST:PORT: the runners also serve their API (a session)


def slurm_time(seconds: float) -> str:
    """``--time`` for ``seconds`` (rounded up to a minute): ``D-HH:MM:SS``."""
    minutes = max(1, math.ceil(seconds / 60))
    days, rest = divmod(minutes * 60, 86400)
    h, rest = divmod(rest, 3600)
    return f"{days}-{h:02d}:{rest // 60:02d}:00"


def _one_line(name: str, value: str) -> str:
    if "\n" in value or "\r" in value or "\0" in value:
        raise TclError(f"{name} {value!r}: a value on one line is needed")
    return value


def sbatch_options(s: BatchScript) -> list[str]:
    opts = [
        f"--job-name={s.job_name}",
        f"--nodes={s.nodes}",
        "--ntasks-per-node=1",
        "--requeue",
        "--open-mode=append",
        f"--output={s.run_dir}/slurm-%j.out",
    ]
    if s.signal_before_s:
        opts.append(f"--signal=USR1@{s.signal_before_s}")
    if s.partition:
        opts.append(f"--partition={s.partition}")
    if s.gres:
        opts.append(f"--gres={s.gres}")
    if s.time_s:
        opts.append(f"--time={slurm_time(s.time_s)}")
    for key, value in (("account", s.account), ("qos", s.qos), ("mem", s.mem)):
        if value:
            opts.append(f"--{key}={value}")
    if s.exclude:
        opts.append(f"--exclude={','.join(s.exclude)}")
    return [_one_line("sbatch option", o) for o in opts]


def inside(s: BatchScript, path: str) -> str:
    """``path`` (under the work dir) as the container sees it."""
    if s.container != "charliecloud" or not s.work:
        return path
    work = s.work.rstrip("/")
    if path == work or path.startswith(work + "/"):
        return CONTAINER_MOUNT + path[len(work) :]
    return path


def wrap_argv(
    container: str, image: str | None, argv: Sequence[str], binds: Sequence[tuple[str, str]]
) -> tuple[list[str], list[str]]:
    """``argv`` run in ``container``: (srun options, the task's argv).

    none: unchanged. charliecloud: ``ch-run -b SRC:DST ... IMAGE -- argv`` (tested).
    pyxis: srun's ``--container-image``/``--container-mounts`` (untested here).
    apptainer: ``apptainer exec --bind SRC:DST IMAGE argv`` (untested here)."""
    if container == "none":
        return [], list(argv)
    if not image:
        raise TclError(f"container {container} needs container_image")
    if container == "charliecloud":
        binds_argv = [x for src, dst in binds for x in ("-b", f"{src}:{dst}")]
        return [], ["ch-run", *binds_argv, image, "--", *argv]
    if container == "pyxis":
        opts = [f"--container-image={image}"]
        if binds:
            opts.append("--container-mounts=" + ",".join(f"{s}:{d}" for s, d in binds))
        return opts, list(argv)
    if container == "apptainer":
        binds_argv = [x for src, dst in binds for x in ("--bind", f"{src}:{dst}")]
        return [], ["apptainer", "exec", *binds_argv, image, *argv]
    raise TclError(f"unknown container runtime {container!r}")


def render(s: BatchScript) -> str:
    """The batch script's text."""
    attempt_dir = f"{s.run_dir}/a${{SLURM_RESTART_COUNT:-0}}"
    attempt_in = f"{inside(s, s.run_dir)}/a${{SLURM_RESTART_COUNT:-0}}"
    runner = [*s.runner, "batch"]
    if s.code:
        runner += ["--code", inside(s, s.code)]
    runner += ["--spec", inside(s, s.spec)]
    if s.serve:
        runner += ["--serve", s.serve]
    if s.work:  # the jobs' project environments, built once for every node and later run;
        # JAX's compilation cache, which a requeued attempt finds on any node
        runner += ["--env-dir", inside(s, f"{s.work}/tcl/envs")]
        runner += ["--compile-cache-dir", inside(s, f"{s.work}/tcl/jax")]
    binds = [(s.work, CONTAINER_MOUNT)] if s.container == "charliecloud" and s.work else []
    if s.container in ("pyxis", "apptainer") and s.work:
        binds = [(s.work, s.work)]
    srun_opts, task = wrap_argv(s.container, s.container_image, runner, binds)
    srun = [
        "srun",
        f"--nodes={s.nodes}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        *srun_opts,
        "bash",
        "-c",
        TASK_SHELL,
        "tcl-task",
    ]
    lines = ["#!/bin/bash"]
    lines += [f"#SBATCH {shlex.quote(o)}" for o in sbatch_options(s)]
    lines += ["# generated by tcl: every value below is quoted; the spec is a separate file"]
    lines += ["set -eu", _COORDINATOR.rstrip("\n")]
    for key, value in s.extra_env:
        lines.append(f"export {_env_name(key)}={shlex.quote(_one_line(key, value))}")
    # the attempt dirs stay double-quoted words: $SLURM_RESTART_COUNT expands, nothing else
    lines.append(
        " ".join(shlex.quote(a) for a in srun)
        + f' "{_dq(attempt_dir)}" "{_dq(attempt_in)}" '
        + " ".join(shlex.quote(a) for a in task)
    )
    return "\n".join(lines) + "\n"


def _dq(path_with_var: str) -> str:
    """A path with one ``${SLURM_RESTART_COUNT:-0}`` for a double-quoted word: every other
    character that is special there is escaped."""
    head, var, tail = path_with_var.rpartition("${SLURM_RESTART_COUNT:-0}")
    esc = "".join("\\" + c if c in '"$`\\' else c for c in head)
    return esc + var + "".join("\\" + c if c in '"$`\\' else c for c in tail)


def _env_name(name: str) -> str:
    if not name.replace("_", "a").isalnum() or name[0].isdigit():
        raise TclError(f"{name!r} is not an environment variable name")
    return name
