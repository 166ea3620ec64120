"""The dashboard as a person uses it: the real `tcl ui` on the local default (no config), in
Debian's headless chromium. A tiny GPT (tcl.jobs, real JAX on CPU) trains while its page shows
the log lines arriving and the loss curve gaining points; the stop button ends it; a matrix's
grid shows its entries coloured by state. Each page's screenshot lands in test-artefacts/ui/.
"""

from __future__ import annotations

import json
import select
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.browser import artefact_path
from tests.integration.tclcli import run_tcl, start_tcl, stop_local_shim_and_tasks, user_env

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = [pytest.mark.integration, pytest.mark.browser]

REPO = Path(__file__).resolve().parents[3]
LIVE_TIMEOUT_MS = 120_000  # JAX's first compile on a loaded 2-core machine
# the highest "train step N" among the page's log lines (tcl.jobs logs one every 5 steps here)
MAX_STEP = (
    "Math.max(0, ...[...document.querySelectorAll('#run-logs .log-line')]"
    ".map(e => +((e.textContent.match(/train step (\\d+)/) || [0, 0])[1])))"
)


@dataclass
class Dash:
    env: dict[str, str]
    work: Path
    url: str

    def tcl(self, *args: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
        return run_tcl(args, self.env, self.work, timeout=timeout_s)

    def tcl_json(self, *args: str) -> Any:
        return json.loads(self.tcl(*args, "--json").stdout)


def _first_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    assert ready, "tcl ui printed no URL"
    return proc.stdout.readline().strip()


def _stop_live_runs(env: dict[str, str], work: Path) -> None:
    def tcl(*args: str) -> subprocess.CompletedProcess[str]:
        return run_tcl(args, env, work, check=False, timeout=120)

    for run in json.loads(tcl("ps", "-a", "--json").stdout or "[]"):
        if run["state"] not in ("succeeded", "failed", "terminated"):
            tcl("stop", run["run_id"])


@pytest.fixture
def dash(tmp_path: Path) -> Iterator[Dash]:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = user_env(home, drop=("TCL_CONFIG", "TCL_DB_URL"))
    ui = start_tcl(["ui", "--no-browser", "--allow-actions"], env, work, stderr=subprocess.DEVNULL)
    d = Dash(env, work, "")
    try:
        d.url = _first_line(ui, 60)
        assert d.url.startswith("http://127.0.0.1:") and "token=" in d.url, d.url
        yield d
    finally:
        _stop_live_runs(env, work)  # a failed test leaves its training run going otherwise
        ui.terminate()
        ui.wait(timeout=20)
        run_tcl(["serve", "--stop"], env, work, check=False, timeout=60)
        stop_local_shim_and_tasks(home / "state" / "local-shim")


def _shot(page: Page, request: pytest.FixtureRequest, what: str) -> None:
    path = artefact_path(f"{request.node.name}-{what}", ".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True)


def _count(page: Page, selector: str) -> int:
    return int(page.eval_on_selector_all(selector, "els => els.length"))


def test_a_training_run_streams_logs_and_loss_and_stops_from_the_page(
    dash: Dash, page: Page, request: pytest.FixtureRequest
) -> None:
    config = (REPO / "examples" / "tiny_gpt.yaml").read_text()
    for old, new in [
        ("total_steps: 600", "total_steps: 100000"),
        ("report_interval: 25", "report_interval: 5"),
        ("validation_interval: 100", "validation_interval: 20"),
        ("checkpoint_interval: 100", "checkpoint_interval: 100000"),
    ]:
        assert old in config
        config = config.replace(old, new)
    (dash.work / "tiny.yaml").write_text(config)
    res = dash.tcl_json(
        "submit", "-d", "--name", "gpt", "--job", "gpt/train", "--job-config", "tiny.yaml"
    )
    run_id = res["run_id"]

    page.goto(dash.url)
    row = page.locator(f'table#runs tr[data-run-id="{run_id}"]')
    row.wait_for()
    _shot(page, request, "runs")
    row.locator(f'a[href="#/runs/{run_id}"]').first.click()
    page.wait_for_selector('body[data-view="run"][data-ready="1"]')

    # log lines arrive while the page is open: the last training step it shows moves on
    page.wait_for_function(f"() => {MAX_STEP} >= 5", timeout=LIVE_TIMEOUT_MS)
    first = int(page.evaluate(f"() => {MAX_STEP}"))
    page.wait_for_function(f"() => {MAX_STEP} >= {first + 20}", timeout=LIVE_TIMEOUT_MS)
    assert _count(page, "#run-logs .log-line") > 2

    # the loss curve gains points as the model trains
    chart = 'div.chart[data-metric="loss"]'
    page.wait_for_function(
        f"() => (document.querySelector('{chart}')?.dataset.points ?? 0) >= 2",
        timeout=LIVE_TIMEOUT_MS,
    )
    points = int(page.get_attribute(chart, "data-points") or 0)
    page.wait_for_function(
        f"() => document.querySelector('{chart}').dataset.points > {points}",
        timeout=LIVE_TIMEOUT_MS,
    )
    plotted = page.evaluate(
        "() => window.tclCharts.loss.data.slice(1).flat().filter(v => v != null).length"
    )
    assert plotted > points >= 2
    labels = page.evaluate("() => window.tclCharts.loss.series.map(s => s.label)")
    assert "train loss" in labels  # val_loss joins it once validation ran (every 20 steps)
    page.check("#log-scale")
    _shot(page, request, "run")

    page.click("#stop-run")
    page.wait_for_function(
        "() => ['terminated', 'failed', 'succeeded'].includes("
        "document.querySelector('#run-state').textContent.trim())",
        timeout=LIVE_TIMEOUT_MS,
    )
    assert page.inner_text("#run-state").strip() == "terminated"
    [run] = [r for r in dash.tcl_json("ps", "-a") if r["run_id"] == run_id]
    assert run["state"] == "terminated"
    _shot(page, request, "stopped")


def test_a_matrix_shows_its_entries_as_a_grid_coloured_by_state(
    dash: Dash, page: Page, request: pytest.FixtureRequest
) -> None:
    dash.tcl(
        "matrix",
        "add",
        "--name",
        "grid",
        "--grid",
        "x=0,1,2,3,4,5",
        "--",
        "python3",
        "-c",
        "import sys; sys.exit(int(sys.argv[1]) % 3 == 0)",
        "{x}",
    )
    page.goto(dash.url + "#/matrices")
    page.wait_for_selector('body[data-view="matrices"][data-ready="1"]')
    row = page.locator("table#matrices tr[data-matrix-id]")
    assert row.count() == 1
    matrix_id = row.get_attribute("data-matrix-id")
    _shot(page, request, "matrices")
    page.goto(f"{dash.url}#/matrices/{matrix_id}")
    page.wait_for_selector('body[data-view="matrix"][data-ready="1"]')
    assert _count(page, "#matrix-grid .cell") == 6
    # x = 0 and 3 exit 1: failed; the others done; the grid follows them to the end
    page.wait_for_function(
        "() => document.querySelectorAll('#matrix-grid .cell[data-state=\"done\"]').length == 4 && "
        "document.querySelectorAll('#matrix-grid .cell[data-state=\"failed\"]').length == 2",
        timeout=LIVE_TIMEOUT_MS,
    )
    colours = page.eval_on_selector_all(
        "#matrix-grid .cell",
        "els => [...new Set(els.map(e => getComputedStyle(e).backgroundColor))]",
    )
    assert len(colours) == 2, colours  # one colour per state
    assert "4" in page.inner_text("#matrix-counts")
    _shot(page, request, "matrix")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not page.is_visible("#requeue-failed"):
        time.sleep(0.2)
    assert page.is_visible("#requeue-failed")
