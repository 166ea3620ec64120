"""The command line: every flag documented with its environment variable; bad settings refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tcl.shim.main import app
from tcl.shim.server import SettingsError, check_loopback, load_token

FLAGS = ["--host", "--port", "--state-dir", "--token-file", "--executor", "--fake-accelerators",
         "--runner-bin", "--reconcile-interval-s", "--pull-stall-timeout-s", "--log-level"]


def test_help_documents_every_flag_with_its_env_var() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0
    text = re.sub(r"\x1b\[[0-9;]*m", "", result.output)
    for flag in FLAGS:
        assert flag in text, flag
        env = "TCL_SHIM_" + flag[2:].upper().replace("-", "_")
        assert env in text, env


def test_non_loopback_host_refused(tmp_path: Path) -> None:
    check_loopback("127.0.0.1")
    check_loopback("::1")
    with pytest.raises(SettingsError, match="loopback"):
        check_loopback("0.0.0.0")
    result = CliRunner().invoke(app, ["--host", "0.0.0.0", "--state-dir", str(tmp_path),
                                      "--token-file", str(tmp_path / "tok")])
    assert result.exit_code == 2 and "loopback" in result.output


def test_token_file(tmp_path: Path) -> None:
    created = tmp_path / "new" / "token"
    token = load_token(created)
    assert len(token) > 30 and created.stat().st_mode & 0o777 == 0o600
    loose = tmp_path / "loose"
    loose.write_text("abc")
    loose.chmod(0o644)
    with pytest.raises(SettingsError, match="chmod 600"):
        load_token(loose)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    with pytest.raises(SettingsError, match="empty"):
        load_token(empty)


def test_bad_fake_accelerators(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["--state-dir", str(tmp_path), "--token-file",
                                      str(tmp_path / "tok"), "--fake-accelerators", "h100"])
    assert result.exit_code == 2 and "CHIP:COUNT" in result.output
