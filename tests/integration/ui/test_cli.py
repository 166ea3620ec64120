"""The real ``tcl ui`` as a user starts it: its first stdout line is the URL, which answers
with the token and refuses without it; the token is written nowhere."""

from __future__ import annotations

import selectors
import subprocess
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.integration.tclcli import TCL, TclEnv

pytestmark = pytest.mark.integration


def _first_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    if not sel.select(timeout_s):
        pytest.fail(f"tcl ui printed nothing in {timeout_s} s")
    return proc.stdout.readline().strip()


def test_tcl_ui_prints_its_url_first_and_guards_it(tmp_path: Path) -> None:
    env = TclEnv(home=tmp_path / "home", config=tmp_path / "config.yaml", repo=tmp_path)
    env.home.mkdir()
    env.config.write_text("hosts:\n  here: {type: local}\n")
    proc = subprocess.Popen(
        [TCL, "ui", "--no-browser", "--port", "0"],
        cwd=tmp_path,
        env=env.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = _first_line(proc, 30)
        parts = urlsplit(url)
        assert (parts.scheme, parts.hostname, parts.path) == ("http", "127.0.0.1", "/"), url
        assert parts.port and parts.port > 0
        (token,) = parse_qs(parts.query)["token"]
        assert len(token) >= 43
        base = f"http://127.0.0.1:{parts.port}"
        with httpx.Client(timeout=10) as http:
            page = http.get(url)
            assert page.status_code == 200 and 'id="nav-runs"' in page.text
            assert http.get(f"{base}/api/info").status_code == 200  # the cookie it set
        with httpx.Client(timeout=10) as anon:
            assert anon.get(f"{base}/").status_code == 401
            assert anon.get(f"{base}/api/runs").status_code == 401
            r = anon.get(f"{base}/api/runs", headers={"Authorization": f"Bearer {token}"})
            body = r.json()
            assert r.status_code == 200 and (body["runs"], body["total"]) == ([], 0)
    finally:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    assert proc.returncode in (0, -15, 130), err
    assert token not in out.replace(url, "") and token not in err
    for f in env.home.rglob("*"):  # never written to a file (the state dir lives in HOME)
        if f.is_file():
            assert token.encode() not in f.read_bytes(), f
