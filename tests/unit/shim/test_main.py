"""The command line: every flag documented with its environment variable; bad settings refused."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tcl.shim.main import app
from tcl.shim.server import SettingsError, check_loopback, load_token
from tcl.tokenfile import token_bits

FLAGS = [
    "--host",
    "--port",
    "--state-dir",
    "--token-file",
    "--uds",
    "--new-token",
    "--executor",
    "--fake-accelerators",
    "--runner-bin",
    "--reconcile-interval-s",
    "--pull-stall-timeout-s",
    "--log-level",
]


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
    result = CliRunner().invoke(
        app,
        ["--host", "0.0.0.0", "--state-dir", str(tmp_path), "--token-file", str(tmp_path / "tok")],
    )
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
    result = CliRunner().invoke(
        app,
        [
            "--state-dir",
            str(tmp_path),
            "--token-file",
            str(tmp_path / "tok"),
            "--fake-accelerators",
            "h100",
        ],
    )
    assert result.exit_code == 2 and "CHIP:COUNT" in result.output


def shim_cli(state: Path, token_file: Path) -> tuple[int, str]:
    """Run ``tcl-shim`` up to its settings checks. The token is checked first; a bad
    --fake-accelerators stops a shim whose token passed before it would start serving."""
    result = CliRunner().invoke(
        app,
        ["--state-dir", str(state), "--token-file", str(token_file), "--fake-accelerators", "h100"],
    )
    return result.exit_code, result.output


def good_token_file(folder: Path) -> Path:
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / "token"
    path.write_text(secrets.token_urlsafe(32) + "\n")
    path.chmod(0o600)
    return path


def not_owned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = good_token_file(tmp_path / "d")
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)  # nobody
    else:  # cannot give a file away: be someone else instead
        uid = os.geteuid() + 1
        monkeypatch.setattr(os, "geteuid", lambda: uid)
    return path


def group_readable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = good_token_file(tmp_path / "d")
    path.chmod(0o640)
    return path


def short_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = good_token_file(tmp_path / "d")
    path.write_text(secrets.token_hex(31) + "\n")  # 248 bits
    return path


def world_writable_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = good_token_file(tmp_path / "d")
    path.parent.chmod(0o777)
    return path


def sticky_world_writable_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = good_token_file(tmp_path / "d")
    path.parent.chmod(0o1777)  # like /tmp
    return path


def a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "d" / "token"
    path.mkdir(parents=True, mode=0o700)
    return path


def spaces_in_token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = good_token_file(tmp_path / "d")
    path.write_text("a b " * 40)
    return path


BAD_TOKEN_FILES = {
    "owner": (not_owned, "owned by uid"),
    "mode": (group_readable, "chmod 600"),
    "short": (short_token, "too short"),
    "world-writable-dir": (world_writable_dir, "world-writable"),
    "sticky-world-writable-dir": (sticky_world_writable_dir, "world-writable"),
    "directory": (a_directory, "is a directory"),
    "spaces": (spaces_in_token, "HTTP header"),
}


@pytest.mark.parametrize("case", BAD_TOKEN_FILES)
def test_bad_token_file_is_refused_in_one_line(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make, expect = BAD_TOKEN_FILES[case]
    path = make(tmp_path, monkeypatch)
    code, output = shim_cli(tmp_path / "state", path)
    assert code == 2, output
    assert output.count("\n") == 1 and "Traceback" not in output, output
    assert output.startswith(f"tcl-shim: --token-file {path}: ") and expect in output, output


def test_good_token_file_passes_and_a_missing_one_is_created(tmp_path: Path) -> None:
    code, output = shim_cli(tmp_path / "state", good_token_file(tmp_path / "d"))
    assert code == 2 and "CHIP:COUNT" in output  # stopped by the next setting, not the token
    created = tmp_path / "new" / "token"
    code, output = shim_cli(tmp_path / "state", created)
    assert "CHIP:COUNT" in output
    assert (
        created.stat().st_mode & 0o777 == 0o600 and created.parent.stat().st_mode & 0o777 == 0o700
    )
    assert token_bits(created.read_text().strip()) >= 256


def test_token_bits() -> None:
    assert token_bits("ab" * 32) == 256  # hex
    assert token_bits(secrets.token_urlsafe(32)) >= 256  # 43 base64url characters
    assert token_bits("a+/=" * 10) == 260  # anything else: 6.5 bits a character


def test_new_token_replaces_the_file_at_each_start(tmp_path: Path) -> None:
    """``--new-token`` (tcl host setup's shims): a token read before a restart is worthless."""
    path = tmp_path / "shim" / "token"
    first = load_token(path)
    assert load_token(path) == first  # kept without the flag
    second = load_token(path, rotate=True)
    third = load_token(path, rotate=True)
    assert len({first, second, third}) == 3
    assert path.read_text().strip() == third and path.stat().st_mode & 0o777 == 0o600
    assert token_bits(third) >= 256
