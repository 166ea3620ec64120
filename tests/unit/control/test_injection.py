"""Values from the config or the command line never add lines to a generated file or options to
an ssh command line: the ssh config ``tcl ssh`` writes, ssh's argv, the shim's systemd unit,
cloud-init user-data. Refused at config load (key and line, all at once) or serialized."""

from __future__ import annotations

import asyncio
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tcl.cli.app import app
from tcl.cli.ssh import _remote_argv
from tcl.control.backends.base import SshEndpoint
from tcl.control.config import SshHost, parse_config
from tcl.control.errors import ConfigError, HostSetupError, TclError
from tcl.control.hostsetup import render_cloud_init, render_unit, setup_host
from tcl.control.transport import sshconfig
from tcl.control.transport.ssh import RemoteResult

PROXY = "ProxyCommand touch /tmp/tcl-injected"


def test_hostile_ssh_and_host_values_are_refused_at_load_with_key_and_line() -> None:
    text = textwrap.dedent(
        """\
        hosts:
          a:
            type: ssh
            ssh: "gpu1\\n  ProxyCommand touch /tmp/X"
          b:
            type: ssh
            ssh: -oProxyCommand=touch-X
          c:
            type: slurm
            ssh: login
            user: -lroot
          d:
            type: ssh
            ssh: gpu4
            proxy_jump: "bastion,-oProxyCommand=x"
          e:
            type: ssh
            ssh: gpu5
            identity_file: "/k\\nProxyCommand x"
          f:
            type: ssh
            ssh: gpu6
            shim_dir: "/srv/tcl\\nExecStartPre=/bin/touch /tmp/X"
          g:
            type: ssh
            ssh: gpu7
            shim_venv: "/opt/venv x"
          h:
            type: local
            fake_accelerators: "h100:1\\nExecStartPre=/bin/touch /tmp/X"
          i:
            type: ssh
            ssh: gpu9
            fake_accelerators: "h100:1 --state-dir /"
        """
    )
    with pytest.raises(ConfigError) as got:
        parse_config(text, "c.yaml")
    lines = str(got.value).splitlines()
    for want in [
        "c.yaml:4: hosts.a.ssh: ",
        "c.yaml:7: hosts.b.ssh: ",
        "c.yaml:11: hosts.c.user: ",
        "c.yaml:15: hosts.d.proxy_jump: ",
        "c.yaml:19: hosts.e.identity_file: ",
        "c.yaml:23: hosts.f.shim_dir: ",
        "c.yaml:27: hosts.g.shim_venv: ",
        "c.yaml:30: hosts.h.fake_accelerators: ",
        "c.yaml:34: hosts.i.fake_accelerators: ",
    ]:
        assert any(line.startswith(want) for line in lines), (want, lines)
    assert len(lines) == 9, lines
    assert "control character" in str(got.value) and "start with '-'" in str(got.value)
    # ordinary values still load
    cfg = parse_config(
        textwrap.dedent(
            """\
            hosts:
              a: {type: ssh, ssh: gpu1.example.com, user: me, proxy_jump: "me@bastion:2222,b2",
                  identity_file: "~/.ssh/my key", shim_dir: ~/.local/share/tcl-shim,
                  fake_accelerators: "h100:4,a100:2"}
              b: {type: ssh, ssh: 10.0.0.2, shim_dir: /var/lib/tcl-shim, shim_venv: /opt/v+1/venv}
              c: {type: local, fake_accelerators: "h100:2"}
            """
        )
    )
    assert set(cfg.hosts) == {"a", "b", "c"}


def _endpoint(host: str, **kw: object) -> SshEndpoint:
    fields: dict[str, object] = dict.fromkeys(
        ["port", "user", "identity_file", "known_hosts", "proxy_jump"]
    )
    return SshEndpoint(host=host, **{**fields, **kw})  # type: ignore[arg-type]


def test_the_generated_ssh_config_refuses_a_value_that_would_add_a_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path))
    for ep in [
        _endpoint(f"gpu1\n  {PROXY}", container_port=2222),
        _endpoint("gpu1", container_port=2222, identity_file=f"/k\n{PROXY}"),
        _endpoint("gpu1", container_port=2222, known_hosts='/k" ProxyCommand "x'),
    ]:
        with pytest.raises(TclError, match=r"control character|quote"):
            text = sshconfig.render({"run1": ("h", ep)}, [])
            pytest.fail(f"rendered: {text}")
    ok = sshconfig.render({"run1": ("h", _endpoint("gpu1", container_port=2222))}, [])
    path = tmp_path / "config"
    path.write_text(ok)
    shown = subprocess.run(
        ["ssh", "-G", "-F", str(path), "run1"], capture_output=True, text=True, check=True
    ).stdout
    assert "proxyjump tcl-host-h" in shown and "proxycommand" not in shown


def test_the_host_reaches_ssh_after_double_dash() -> None:
    ep = _endpoint(f"-o{PROXY}", remote_argv=("srun", "--pty", "bash"))
    argv = _remote_argv(ep, [])
    assert argv.index("--") < argv.index(ep.host)
    # what ssh itself makes of it: the value is a (bad) host name, never an option
    shown = subprocess.run(["ssh", "-G", *argv], capture_output=True, text=True)
    assert "touch" not in shown.stdout


def test_the_systemd_unit_refuses_values_that_would_add_lines() -> None:
    unit = render_unit("/srv/tcl/venv", "/srv/tcl", 10998, "docker", "h100:8")
    assert "ExecStart=/srv/tcl/venv/bin/tcl-shim " in unit
    bad = [
        ("/srv/tcl/venv", "/srv/tcl\nExecStartPre=/bin/touch /tmp/X", "h100:8"),
        ("/srv/tcl/venv\nExecStartPre=/bin/touch /tmp/X", "/srv/tcl", "h100:8"),
        ("/srv/tcl/venv", "/srv/tcl", "h100:8\nExecStartPre=/bin/touch /tmp/X"),
        ("/srv/my venv", "/srv/tcl", None),
        ("/srv/tcl/venv", "/srv/%h", None),
    ]
    for venv, shim_dir, fake in bad:
        with pytest.raises(TclError, match=r"plain path|fake_accelerators"):
            text = render_unit(venv, shim_dir, 10998, "docker", fake)
            pytest.fail(f"rendered: {text}")


CRAFTED = 'tcl==1"]\n  - [touch, /tmp/X]\n  - ["true'


def test_cloud_init_user_data_is_serialized_not_pasted() -> None:
    for text in [
        render_cloud_init(CRAFTED),
        render_cloud_init("tcl==1", extra_requirements=[CRAFTED]),
    ]:
        assert text.startswith("#cloud-config\n")
        doc = yaml.safe_load(text)
        assert not [c for c in doc["runcmd"] if c[0] == "touch"], doc["runcmd"]
        (pip,) = [c for c in doc["runcmd"] if c[0].endswith("/bin/pip")]
        assert CRAFTED in pip


def test_cloud_init_cli_package_is_one_pip_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path / "state"))
    res = CliRunner().invoke(app, ["host", "cloud-init", "--package", CRAFTED])
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load(res.stdout)
    assert [c[0] for c in doc["runcmd"]].count("touch") == 0
    assert ["/var/lib/tcl-shim/venv/bin/pip", "install", "--quiet", CRAFTED] in doc["runcmd"]


class _RecordingPool:
    """What `tcl host setup` would run on the host (nothing, when its paths are refused)."""

    def __init__(self) -> None:
        self.argvs: list[list[str]] = []

    async def run(self, target: object, argv: list[str], **_kw: object) -> RemoteResult:
        self.argvs.append(list(argv))
        return RemoteResult(0, "", "")


class _Backend:
    def __init__(self, shim_dir: str) -> None:
        self.cfg = SshHost(type="ssh", ssh="h1", shim_package="tcl-submit==1.0")
        self.pool, self.target, self.name, self._dir = _RecordingPool(), object(), "h1", shim_dir

    async def shim_dir(self) -> str:
        return self._dir


def test_host_setup_refuses_a_shim_dir_that_is_not_plain_before_doing_anything() -> None:
    backend = _Backend("/home/a b\nExecStartPre=/bin/touch /tmp/X/.local/share/tcl-shim")
    with pytest.raises(HostSetupError, match=r"h1: shim_dir .* not an absolute plain path"):
        asyncio.run(setup_host(backend))  # type: ignore[arg-type]
    assert backend.pool.argvs == []


def test_ssh_options_before_the_command_are_tcl_s_and_a_command_gets_no_terminal() -> None:
    """`tcl ssh RUN --node 1 -- hostname` (the documented form) reached the node's shell as
    `--node 1 -- hostname` (`bash: --: invalid option`); and a command got `srun --pty`, whose
    `ioctl(TIOCGWINSZ)` errors went to the user's output without a terminal (issue 32)."""
    from tcl.cli.ssh import _own_options

    assert _own_options(["--node", "1", "--", "hostname"], 0, False) == (["hostname"], 1, False)
    assert _own_options(["--node=2", "ls", "-la"], 0, False) == (["ls", "-la"], 2, False)
    assert _own_options(["--", "--node", "1"], 0, False) == (["--node", "1"], 0, False)
    assert _own_options(["--print-config"], 0, False) == ([], 0, True)
    ep = SshEndpoint(
        "login",
        None,
        None,
        None,
        None,
        None,
        remote_argv=("srun", "bash"),
        remote_tty_argv=("srun", "--pty", "bash"),
    )
    assert _remote_argv(ep, ["hostname"])[-1] == "srun bash hostname"
    shell = _remote_argv(ep, [])
    assert "-t" in shell and shell[-1] == "srun --pty bash"
