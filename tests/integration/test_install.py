"""Installing tcl as a user would: ``uv tool install`` outside the checkout, and a fresh host
brought up by the user-data ``tcl host cloud-init --wheel`` prints.

cloud-init itself cannot run here (no VM), so its two modules the user-data uses are played as
cloud-init does, in a bare container of the testbed's Debian (no checkout, no tcl): every
``write_files`` entry (``encoding: b64`` included) is written, then every ``runcmd`` argv is run
in order; ``systemctl`` (no systemd in a container) is replaced by the unit's own ``ExecStart``.
The host reaches PyPI for tcl's dependencies, as a cloud VM would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tcl import DISTRIBUTION, __version__

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
TCL = [str(Path(sys.executable).with_name("tcl"))]  # this environment's `tcl`

# Runs inside the container (stdlib only): apply write_files, run runcmd, start the shim from
# its unit's ExecStart, then wait for its healthcheck with the token made on the host.
PLAYER = r"""
import base64, json, os, shlex, subprocess, sys, time, urllib.request
plan = json.load(open("/plan.json"))
for f in plan["write_files"]:
    os.makedirs(os.path.dirname(f["path"]), exist_ok=True)
    data = f["content"].encode()
    if f.get("encoding") == "b64":
        data = base64.b64decode(data)
    with open(f["path"], "wb") as out:
        out.write(data)
    os.chmod(f["path"], int(f.get("permissions", "0644"), 8))
for argv in plan["runcmd"]:
    if argv[0] == "systemctl":
        continue
    print("+", shlex.join(argv), flush=True)
    subprocess.run(argv, check=True)
unit = open("/etc/systemd/system/tcl-shim.service").read()
exec_start = next(l for l in unit.splitlines() if l.startswith("ExecStart="))[len("ExecStart="):]
shim = subprocess.Popen(shlex.split(exec_start))
for _ in range(600):
    # read at each try: the shim writes a new token when it starts (--new-token)
    token = open(plan["token_file"]).read().strip()
    req = urllib.request.Request(f"http://127.0.0.1:{plan['port']}/api/healthcheck",
                                 headers={"Authorization": f"Bearer {token}"})
    try:
        print("HEALTH", urllib.request.urlopen(req, timeout=2).read().decode(), flush=True)
        sys.exit(0)
    except OSError:
        if shim.poll() is not None:
            sys.exit(f"the shim exited with {shim.returncode}")
        time.sleep(0.1)
sys.exit("the shim never answered")
"""


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "UV_PROJECT"))}
    env.update(UV_TOOL_DIR=str(tmp_path / "tools"), UV_TOOL_BIN_DIR=str(tmp_path / "bin"))
    return env


@pytest.mark.parametrize("source", ["wheel", "checkout"])
def test_uv_tool_install_gives_working_commands_outside_the_checkout(
    tmp_path: Path, source: str
) -> None:
    env = _env(tmp_path)
    target = str(REPO)
    if source == "wheel":
        subprocess.run(
            ["uv", "build", "--wheel", "-o", str(tmp_path / "dist"), str(REPO)],
            check=True,
            capture_output=True,
            env=env,
        )
        (wheel,) = (tmp_path / "dist").glob("*.whl")
        assert wheel.name.startswith(f"{DISTRIBUTION.replace('-', '_')}-{__version__}-")
        target = str(wheel)
    install = subprocess.run(
        ["uv", "tool", "install", target],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert install.returncode == 0, install.stderr
    elsewhere = tmp_path / "some-project"
    elsewhere.mkdir()
    bin_dir = tmp_path / "bin"

    def tcl(*args: str) -> subprocess.CompletedProcess[str]:
        """The installed tcl, run from a directory that is no checkout."""
        argv = [str(bin_dir / "tcl"), *args]
        return subprocess.run(argv, capture_output=True, text=True, cwd=elsewhere, env=env)

    version = tcl("--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"tcl {__version__} ({DISTRIBUTION})"
    for agent in ("tcl-shim", "tcl-runner"):
        subprocess.run([str(bin_dir / agent), "--help"], capture_output=True, check=True)
    # `tcl host cloud-init --wheel` (and `host setup`) from the tool install: no checkout to
    # build from, so the installed distribution is repacked (it failed: issue 31)
    user_data = tcl("host", "cloud-init", "--wheel")
    assert user_data.returncode == 0, user_data.stderr
    tool_python = tmp_path / "tools" / DISTRIBUTION / "bin" / "python"
    repack = (
        "import sys\nfrom pathlib import Path\nfrom tcl.control.selfwheel import repack_installed\n"
        "print(repack_installed(Path(sys.argv[1])))"
    )
    wheel_dir = tmp_path / "repacked"
    wheel_dir.mkdir()
    out = subprocess.run(
        [str(tool_python), "-c", repack, str(wheel_dir)],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        check=True,
    )
    repacked = Path(out.stdout.strip())
    venv = tmp_path / "host-venv"
    subprocess.run(["uv", "venv", "-q", str(venv)], check=True, env=env, capture_output=True)
    installed = subprocess.run(
        [
            "uv",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--python",
            str(venv / "bin" / "python"),
            str(repacked),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    check = "import tcl, tcl.runner.main; print(tcl.__version__)"  # no dependency installed
    got = subprocess.run(
        [str(venv / "bin" / "python"), "-c", check], capture_output=True, text=True, check=False
    )
    assert got.stdout.strip() == __version__, got.stderr
    assert (venv / "bin" / "tcl-runner").exists() and (venv / "bin" / "tcl-shim").exists()


def test_cloud_init_user_data_brings_up_a_healthy_shim_on_a_bare_host(
    tmp_path: Path, docker_client: Any, base_image: str
) -> None:
    port = 10998
    out = subprocess.run(
        [
            *TCL,
            "host",
            "cloud-init",
            "--wheel",
            "--executor",
            "process",
            "--fake-accelerators",
            "h100:2",
            "--port",
            str(port),
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    doc = yaml.safe_load(out.stdout)
    pip = next(c for c in doc["runcmd"] if "install" in c)
    assert pip[-1].endswith(".whl") and any(f["path"] == pip[-1] for f in doc["write_files"])
    plan = {**doc, "token_file": "/var/lib/tcl-shim/token", "port": port}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    (tmp_path / "player.py").write_text(PLAYER)
    logs = docker_client.containers.run(
        base_image,
        ["python3", "/player.py"],
        remove=True,
        stdout=True,
        stderr=True,
        volumes={
            str(tmp_path / "plan.json"): {"bind": "/plan.json", "mode": "ro"},
            str(tmp_path / "player.py"): {"bind": "/player.py", "mode": "ro"},
        },
    ).decode()
    health = json.loads(logs.split("HEALTH ", 1)[1].splitlines()[0])
    assert health["service"] == "tcl-shim" and health["version"] == __version__
