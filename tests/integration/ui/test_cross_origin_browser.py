"""The finding as it happened, in headless Chromium against the real ``tcl ui``: the user has
the dashboard open (its token cookie is in the browser), and a page served on ANOTHER loopback
port (another user's server, a dev server, a forwarded Jupyter whose content a job controls)
tries to stop a run, requeue a sweep's failures and read a run's logs. SameSite does not stop
the cookie (it ignores ports); the UI's Origin and header checks must. The dashboard's own page
still stops, requeues and streams logs."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlsplit

import httpx
import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.integration, pytest.mark.browser]

# what the other page's script does with the user's browser: the POSTs a no-cors fetch may
# send (with the cookie), and the log WebSocket; what it got lands on <body data-result>
ATTACK = """<!doctype html>
<html><head><meta charset="utf-8"><title>another local server</title>
<link rel="icon" href="data:,"></head><body><script>
const ui = new URLSearchParams(location.search).get("ui");
async function post(path) {
  try {
    await fetch(ui + path, { method: "POST", mode: "no-cors", credentials: "include" });
    return "sent";
  } catch (e) { return "failed: " + e; }
}
function logs() {
  return new Promise((resolve) => {
    const got = [];
    let opened = false;
    const ws = new WebSocket(ui.replace(/^http/, "ws") + "/api/runs/ok-run/logs");
    ws.onopen = () => { opened = true; };
    ws.onmessage = (ev) => got.push(ev.data);
    ws.onclose = () => resolve({ opened, got });
  });
}
(async () => {
  const out = {};
  out.stop = await post("/api/runs/wait-run/stop");
  out.requeue = await post("/api/matrices/sweep/requeue");
  out.logs = await logs();
  document.body.dataset.result = JSON.stringify(out);
})();
</script></body></html>
"""


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def other_site(tmp_path: Path) -> Iterator[str]:
    """``ATTACK`` served by http.server on another loopback port."""
    root = tmp_path / "other-site"
    root.mkdir()
    (root / "index.html").write_text(ATTACK)
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _api(url: str, path: str) -> Any:
    """What the UI holds now, read with the token (not through the browser)."""
    parts = urlsplit(url)
    (token,) = parse_qs(parts.query)["token"]
    base = f"{parts.scheme}://{parts.netloc}"
    r = httpx.get(base + path, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    r.raise_for_status()
    return r.json()


def test_a_page_on_another_loopback_port_cannot_act_or_read_logs(
    page_url: str, other_site: str, page: Page
) -> None:
    ui = f"http://127.0.0.1:{urlsplit(page_url).port}"
    page.goto(page_url + "#/runs")  # the user's dashboard: the cookie is set
    page.wait_for_selector('body[data-view="runs"][data-ready="1"]')
    assert other_site != ui + "/"

    other = page.context.new_page()
    other.goto(f"{other_site}?ui={quote(ui)}")
    other.wait_for_selector("body[data-result]", state="attached")
    result = json.loads(other.get_attribute("body", "data-result") or "{}")
    other.close()
    # the no-cors fetches were sent (and answered: the stop's answer comes after the stop)
    assert result["stop"] == "sent" and result["requeue"] == "sent", result
    assert _api(page_url, "/api/runs/wait-run")["run"]["state"] == "pending"
    assert _api(page_url, "/api/matrices/sweep")["counts"]["failed"] == 2
    assert result["logs"] == {"opened": False, "got": []}, result  # no log line read

    # the dashboard's own page: stop, live logs, requeue
    page.click('tr[data-run-id="wait-run"] button.stop')
    page.wait_for_selector('tr[data-run-id="wait-run"][data-state="terminated"]')
    assert _api(page_url, "/api/runs/wait-run")["run"]["state"] == "terminated"
    page.goto(page_url + "#/runs/ok-run")
    page.wait_for_selector('body[data-view="run"][data-ready="1"]')
    page.wait_for_function("() => document.querySelectorAll('#run-logs .log-line').length >= 2")
    lines = page.eval_on_selector_all("#run-logs .log-line", "els => els.map(e => e.textContent)")
    assert lines == ["hello", "<warn>"]
    page.goto(page_url + "#/matrices/sweep")
    page.wait_for_selector('body[data-view="matrix"][data-ready="1"]')
    page.click("#requeue-failed")
    page.wait_for_function(
        "() => document.querySelector('#requeue-note').textContent.startsWith('queued 2')"
    )
    assert _api(page_url, "/api/matrices/sweep")["counts"]["failed"] == 0
