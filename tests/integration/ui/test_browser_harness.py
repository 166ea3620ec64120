"""The browser harness itself (tests/browser.py), end to end: Debian's chromium, driven by
Playwright, loads a static page served on loopback, runs its script, and is photographed."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.browser

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>harness</title>
<link rel="icon" href="data:,"></head>
<body>
<h1 id="greeting">Hello from tcl</h1>
<ul id="items"><li>a</li><li>b</li><li>c</li></ul>
<p id="sum"></p>
<script>
  // computed in the page: the test sees it only if the browser really ran this script
  const n = document.querySelectorAll("#items li").length;
  document.getElementById("sum").textContent = String(n * 14);
  document.body.dataset.ready = "1";
</script>
</body></html>
"""


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def site(tmp_path: Path) -> Iterator[str]:
    """``PAGE`` served by http.server on 127.0.0.1 (a free port), in a thread."""
    (tmp_path / "index.html").write_text(PAGE)
    handler = functools.partial(_QuietHandler, directory=str(tmp_path))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_page_renders_and_runs_its_script(page: Page, site: str, tmp_path: Path) -> None:
    page.goto(site)
    page.wait_for_selector('body[data-ready="1"]')
    assert page.title() == "harness"
    assert page.text_content("#greeting") == "Hello from tcl"
    assert page.text_content("#sum") == "42"
    assert page.evaluate("() => document.querySelectorAll('#items li').length") == 3
    shot = tmp_path / "shot.png"
    page.screenshot(path=str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
