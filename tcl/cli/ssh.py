"""``tcl ssh RUN [-- CMD]``: a shell (or a command) inside the run's container (on the local
default: here, in the job's dir with its environment)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tcl.cli._common import err, fail, out, with_control
from tcl.control.errors import TclError

if TYPE_CHECKING:
    from tcl.control.backends.base import SshEndpoint
    from tcl.control.service import Control


def _endpoint(ctl: Control, run_id: str, node: int) -> SshEndpoint | None:
    att = ctl.store.latest_attempt(run_id)
    if att is None or not att.handle:
        return None
    handle = ctl.handle(att)
    if node >= handle.node_count:
        raise TclError(f"run {run_id} has {handle.node_count} node(s): no node {node}")
    return ctl.backend_for(att).ssh_endpoint(handle, node)


def _other_endpoint(ctl: Control, run_id: str) -> SshEndpoint | None:
    """Another live run's entry for the same config file (so ``ssh OTHER`` keeps working)."""
    try:
        return _endpoint(ctl, run_id, 0)
    except TclError:
        return None


async def _target(ctl: Control, run_ref: str, node: int) -> tuple[str, Path | SshEndpoint]:
    """The ssh config's host name for the run's node and the file, or the endpoint that opens
    the shell with a command on the host (a SLURM job: ``srun --overlap --pty``)."""
    from tcl.control.transport import sshconfig

    run = ctl.store.resolve(run_ref)
    if run.state.is_final:
        raise TclError(f"run {run.id} is {run.state.value}: its container is gone")
    ep = _endpoint(ctl, run.id, node)
    if ep is None:
        raise TclError(
            f"run {run.id} has no ssh endpoint (only docker tasks on ssh hosts run an sshd, "
            "and SLURM jobs and Volcano pods once they run)"
        )
    if ep.remote_argv or ep.local_env_file or ep.session:
        return run.id, ep
    name = run.id if node == 0 else f"{run.id}-node{node}"
    entries: dict[str, tuple[str, SshEndpoint]] = {name: (run.host or "", ep)}
    for r in ctl.store.list_runs(include_final=False):
        other = _other_endpoint(ctl, r.id) if r.id != run.id else None
        if other is not None and other.container_port is not None:
            entries[r.id] = (r.host or "", other)
    includes = [e.ssh_config_file for _, e in entries.values() if e.ssh_config_file]
    includes.append("~/.ssh/config")
    return name, sshconfig.write(entries, sorted(set(includes), key=includes.index))


def _remote_argv(ep: SshEndpoint, command: list[str]) -> list[str]:
    """``ssh [-F file] [opts] -t -- host REMOTE`` for an endpoint that runs a command."""
    import shlex

    argv = ["-F", ep.ssh_config_file] if ep.ssh_config_file else []
    for opt, val in (
        ("-p", ep.port),
        ("-l", ep.user),
        ("-i", ep.identity_file),
        ("-J", ep.proxy_jump),
    ):
        if val is not None:
            argv += [opt, str(val)]
    if ep.known_hosts is not None:
        argv += ["-o", f"UserKnownHostsFile={ep.known_hosts}"]
    remote = ep.remote_argv
    if not command:  # a shell: a terminal on both ends
        argv.append("-t")
        remote = ep.remote_tty_argv or remote
    # `--` first: a host starting with `-` is a (bad) host name, never an option. ssh sends one
    # string that the remote shell splits: quote every word
    return [*argv, "--", ep.host, shlex.join([*remote, *command])]


def _own_options(words: list[str], node: int, print_config: bool) -> tuple[list[str], int, bool]:
    """``--node N``, ``--node=N`` and ``--print-config`` before the command (or its ``--``)."""
    while words:
        word = words[0]
        if word == "--":
            return words[1:], node, print_config
        if word == "--print-config":
            print_config, words = True, words[1:]
        elif word == "--node" or word.startswith("--node="):
            value = word.partition("=")[2] if "=" in word else (words[1] if len(words) > 1 else "")
            if not value.isdigit():
                raise fail(f"--node needs a node number (got {value!r})")
            node, words = int(value), words[1 if "=" in word else 2 :]
        else:
            break
    return words, node, print_config


def cmd_ssh(
    ctx: typer.Context,
    run_ref: Annotated[str, typer.Argument(metavar="RUN", help="Run id, prefix or name.")],
    command: Annotated[list[str] | None, typer.Argument(help="Command to run (after --).")] = None,
    print_config: Annotated[
        bool, typer.Option("--print-config", help="Only write the ssh config; print its path.")
    ] = False,
    node: Annotated[int, typer.Option("--node", min=0, help="Node of a multi-node run.")] = 0,
) -> None:
    """Open a shell in the run's container (uses the host as ProxyJump); on the local default,
    a shell here in the job's dir with its environment."""
    # Options stop at RUN (so `tcl ssh RUN ls -la` keeps its -la): the documented
    # `tcl ssh RUN --node 1 -- CMD` and `tcl ssh RUN --print-config` arrive as the command's
    # first words, ours up to a `--`.
    command, node, print_config = _own_options(list(command or []), node, print_config)
    if print_config and command:
        raise fail("--print-config writes the ssh config only: give it no COMMAND")
    name, target = with_control(ctx, lambda ctl: _target(ctl, run_ref, node))
    if not isinstance(target, Path) and target.local_env_file:
        if print_config:
            raise fail(f"run {name} runs on this machine: `tcl ssh {name}` opens a shell here")
        raise typer.Exit(_shell_here(name, Path(target.local_env_file), command))
    if not isinstance(target, Path) and target.session is not None:
        if print_config:
            raise fail(f"run {name} is reached through its cluster's API, not an ssh config")
        try:
            code = target.session(command)
        except TclError as e:
            raise fail(str(e)) from None
        raise typer.Exit(code)
    ssh = shutil.which("ssh")
    if isinstance(target, Path):
        if print_config:
            out.print(str(target), markup=False)
            err.print(f"add `Include {target}` to ~/.ssh/config, then: ssh {name}", markup=False)
            return
        argv = [ssh or "ssh", "-F", str(target), "--", name, *command]
    else:
        if print_config:
            raise fail(f"run {name} is reached with a command on its host, not an ssh config")
        argv = [ssh or "ssh", *_remote_argv(target, command)]
    if ssh is None:
        raise fail("no ssh client on PATH")
    proc = subprocess.run(argv, check=False)
    raise typer.Exit(proc.returncode)


def _shell_here(name: str, env_file: Path, command: list[str]) -> int:
    """A shell (or ``command``) on this machine, in the job's dir with its environment: the
    local default's jobs are processes here, with no sshd to reach."""
    if not env_file.exists():
        raise fail(f"run {name}'s job has not started yet: try again once it runs")
    bash = shutil.which("bash")
    if bash is None:
        raise fail("no bash on PATH")
    if command:  # the file is sourced, then the command runs with its words as given
        argv = [bash, "-c", '. "$0" && exec "$@"', str(env_file), *command]
    else:
        argv = [bash, "--rcfile", str(env_file), "-i"]
    return subprocess.run(argv, check=False).returncode


def register(app: typer.Typer) -> None:
    app.command("ssh", context_settings={"allow_interspersed_args": False})(cmd_ssh)
