"""Bad input on a TPU host: one clear line each, and nothing created (the emulator's request log
shows no write). Only the Cloud TPU API emulator is needed (no workers)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.tclcli import TclEnv
from tests.tpuemu import TpuEmulator

pytestmark = [pytest.mark.integration, pytest.mark.tpu]

PY = sys.executable


def _config(
    url: str, zone: str = "us-central2-b", accel: str = "v5p-8", credentials: str = "anonymous"
) -> str:
    return f"""
hosts:
  pod:
    type: tpu
    zone: {zone}
    project: proj
    accelerator_type: {accel}
    version: tpu-ubuntu2204-base
    api_endpoint: {url}
    credentials: {credentials}
"""


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[TpuEmulator]:
    with TpuEmulator(log_dir=tmp_path / "emu") as e:
        yield e


def _env(tmp_path: Path, text: str) -> TclEnv:
    home, repo = tmp_path / "home", tmp_path / "repo"
    home.mkdir(exist_ok=True)
    repo.mkdir(exist_ok=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    config = tmp_path / "config.yaml"
    config.write_text(text)
    return TclEnv(home, config, repo)


def _writes(emu: TpuEmulator) -> list[str]:
    return [f"{r['method']} {r['path']}" for r in emu.requests() if r["method"] != "GET"]


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "pod" in line]


def test_unknown_accelerator_type_names_the_key_and_line(emu: TpuEmulator, tmp_path: Path) -> None:
    env = _env(tmp_path, _config(emu.url, accel="v9-8"))
    res = env.tcl("submit", "--yes", "--chip", "tpu-v5p", "-n", "4", "--", PY, "-V", check=False)
    assert res.returncode == 2, res.stderr
    assert res.stderr.endswith(
        "config.yaml:7: hosts.pod.accelerator_type: unknown TPU accelerator "
        "type 'v9-8' (known: v2-N, v3-N, v4-N, v5p-N, v5litepod-N, v6e-N)\n"
    )
    assert emu.requests() == []


def test_a_zone_the_api_rejects_is_one_line_naming_the_zone(
    emu: TpuEmulator, tmp_path: Path
) -> None:
    env = _env(tmp_path, _config(emu.url, zone="mars-north1-z"))
    res = env.tcl("submit", "--yes", "--chip", "tpu-v5p", "-n", "4", "--", PY, "-V", check=False)
    assert res.returncode == 1, res.stderr
    lines = _error_lines(res.stderr)
    assert len(lines) == 1, res.stderr
    assert "zone mars-north1-z is not a Cloud TPU location of project proj" in lines[0]
    assert _writes(emu) == []


def test_missing_credentials_is_one_line_with_the_fix(
    emu: TpuEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    monkeypatch.setenv("NO_GCE_CHECK", "True")  # no metadata server to wait for here
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "gcloud"))
    env = _env(tmp_path, _config(emu.url, credentials="adc"))
    res = env.tcl("submit", "--yes", "--chip", "tpu-v5p", "-n", "4", "--", PY, "-V", check=False)
    assert res.returncode == 1, res.stderr
    lines = _error_lines(res.stderr)
    assert len(lines) == 1, res.stderr
    assert "no Google Cloud credentials: run `gcloud auth application-default login`" in lines[0]
    assert emu.requests() == []
