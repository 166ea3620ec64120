"""``tcl ssh RUN [-- CMD]``: a shell (or a command) inside the run's container."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tcl.cli._common import err, fail, out, with_control
from tcl.control.errors import TclError

if TYPE_CHECKING:
    from tcl.control.service import Control


async def _write_config(ctl: Control, run_ref: str) -> tuple[str, Path]:
    from tcl.control import sshconfig
    from tcl.control.config import SshHost

    run = ctl.store.resolve(run_ref)
    entries = {}
    includes: list[str] = []
    for r in [run, *ctl.store.list_runs(include_final=False)]:
        att = ctl.store.latest_attempt(r.id)
        port = att.handle.get("ssh_port") if att else None
        if att is None or not isinstance(port, int) or att.host not in ctl.cfg.hosts:
            continue
        ep = ctl.backend(att.host).ssh_endpoint(port)
        if ep is None:
            continue
        entries[r.id] = (att.host, ep)
        host = ctl.cfg.hosts[att.host]
        if isinstance(host, SshHost) and host.ssh_config_file:
            includes.append(host.ssh_config_file)
    if run.id not in entries:
        raise TclError(
            f"run {run.id} has no ssh endpoint (only docker tasks on ssh hosts run an sshd)"
        )
    if run.state.is_final:
        raise TclError(f"run {run.id} is {run.state.value}: its container is gone")
    includes.append("~/.ssh/config")
    return run.id, sshconfig.write(entries, sorted(set(includes), key=includes.index))


def cmd_ssh(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id, prefix or name.")],
    command: Annotated[list[str] | None, typer.Argument(help="Command to run (after --).")] = None,
    print_config: Annotated[
        bool, typer.Option("--print-config", help="Only write the ssh config; print its path.")
    ] = False,
) -> None:
    """Open a shell in the run's container (uses the host as ProxyJump)."""
    # Options stop at RUN (so `tcl ssh RUN ls -la` keeps its -la): the documented
    # `tcl ssh RUN --print-config` arrives as the first word of the command.
    command = list(command or [])
    if command[:1] == ["--print-config"]:
        print_config = True
        command = command[1:]
    if print_config and command:
        raise fail("--print-config writes the ssh config only: give it no COMMAND")
    run_id, path = with_control(ctx, lambda ctl: _write_config(ctl, run_ref))
    if print_config:
        out.print(str(path), markup=False)
        err.print(f"add `Include {path}` to ~/.ssh/config, then: ssh {run_id}", markup=False)
        return
    ssh = shutil.which("ssh")
    if ssh is None:
        raise fail("no ssh client on PATH")
    proc = subprocess.run([ssh, "-F", str(path), run_id, *command], check=False)
    raise typer.Exit(proc.returncode)


def register(app: typer.Typer) -> None:
    app.command("ssh", context_settings={"allow_interspersed_args": False})(cmd_ssh)
