"""The dashboard over a crowded store (``crowd.py``: 2,000 runs, a 1,200-entry matrix), in
headless Chromium against the real ``tcl ui``: the runs page leads with a summary and the
running and failed runs, with their duration, nodes and GPUs, cause and last error; a matrix's
entries show their manifest fields as columns and group by one; a run page says it is loading,
and that a running job has printed nothing yet; log lines are coloured by level, not stream.
Each page's screenshot lands in test-artefacts/ui/."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.browser import artefact_path
from tests.integration.ui.crowd import (
    COUNTS,
    LOG_LINES,
    LOG_RUN,
    OOM,
    RUNS,
    TWO_NODES,
    crowd_id,
    crowd_state,
)

if TYPE_CHECKING:
    from playwright.sync_api import Page, Route

pytestmark = [pytest.mark.integration, pytest.mark.browser]
TOTAL = RUNS + 5  # the crowd, conftest.seed()'s four, the log run


def _shot(page: Page, request: pytest.FixtureRequest, what: str) -> None:
    path = artefact_path(f"{request.node.name}-{what}", ".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=False)


def _ready(page: Page, view: str) -> None:
    page.wait_for_selector(f'body[data-view="{view}"][data-ready="1"]')


def _texts(page: Page, selector: str) -> list[str]:
    return [str(t) for t in page.eval_on_selector_all(selector, "els => els.map(e => e.innerText)")]


def test_runs_page_leads_with_a_summary_then_running_and_failed_runs(
    crowd_url: str, page: Page, request: pytest.FixtureRequest
) -> None:
    from playwright.sync_api import expect

    page.goto(crowd_url + "#/runs")
    _ready(page, "runs")
    summary = page.locator("#runs-summary")
    for state, n in COUNTS.items():
        expect(summary.locator(f'[data-state="{state}"]')).to_have_attribute("data-count", str(n))
    expect(summary).to_contain_text(f"{COUNTS['running']} running")
    expect(summary).to_contain_text(f"{COUNTS['failed']} failed")
    expect(page.locator("#runs-count")).to_have_text(f"{TOTAL}/{TOTAL}")

    states = page.eval_on_selector_all("#runs tbody tr", "trs => trs.map(t => t.dataset.state)")
    lead = COUNTS["running"] + COUNTS["failed"]
    assert states[: COUNTS["running"]] == ["running"] * COUNTS["running"]
    assert states[COUNTS["running"] : lead] == ["failed"] * COUNTS["failed"]
    assert "running" not in states[lead:] and "failed" not in states[lead:]
    assert len(states) == TOTAL

    heads = _texts(page, "#runs thead th")
    for col in ("duration", "node / GPU", "cause", "last error"):
        assert col in heads, heads
    failed = next(i for i in range(RUNS) if crowd_state(i).value == "failed")
    row = page.locator(f'#runs tr[data-run-id="{crowd_id(failed)}"]')
    expect(row.locator("td.cause")).to_have_text("exit 3")
    expect(row.locator("td.last-error")).to_have_text(f"{OOM} (step {failed})")
    expect(row.locator("td.nodes")).to_contain_text("gpu-")
    expect(row.locator("td.nodes")).to_contain_text("GPU")
    expect(row.locator("td.duration")).to_have_text(_took(failed))
    two = page.locator(f'#runs tr[data-run-id="{TWO_NODES}"] td.nodes')
    expect(two).to_contain_text("gpu-a")
    expect(two).to_contain_text("gpu-b")
    expect(two).to_contain_text("0,1")
    succeeded = page.locator('#runs tbody tr[data-state="succeeded"]')
    assert succeeded.count() == COUNTS["succeeded"]
    assert (
        page.locator('#runs tbody tr[data-state="succeeded"]:has-text("exit code 0")').count() == 0
    )
    _shot(page, request, "runs")

    summary.locator('[data-state="failed"]').click()  # the summary filters the table
    expect(page.locator("#runs-count")).to_have_text(f"{COUNTS['failed']}/{TOTAL}")
    assert page.locator("#runs tbody tr:visible").count() == COUNTS["failed"]
    _shot(page, request, "failed")


def _took(i: int) -> str:
    """The crowd's final run ``i`` took 25 + i % 600 s from its attempt's start (``m ss``)."""
    s = 25 + i % 600
    return f"{s // 60}m {s % 60:02d}s"


def test_matrix_entries_show_manifest_fields_and_group_by_one(
    crowd_url: str, page: Page, request: pytest.FixtureRequest
) -> None:
    from playwright.sync_api import expect

    page.goto(crowd_url + "#/matrices/big")
    _ready(page, "matrix")
    heads = _texts(page, "#matrix-entries thead th")
    assert heads[:3] == ["#", "job", "state"] and heads[3:6] == ["method", "lang", "run_kind"]
    assert page.locator("#matrix-entries tbody tr").count() == 1200
    cells = page.locator("#matrix-grid .cell")
    assert cells.count() == 1200
    first = cells.first
    expect(first).to_have_attribute(
        "title", "fft-en-train-0: method=fft lang=en run_kind=train seed=0 — done"
    )
    expect(first).to_have_attribute(
        "aria-label", "fft-en-train-0: method=fft lang=en run_kind=train seed=0 — done"
    )
    expect(page.locator("#matrix-legend")).to_contain_text("one square per entry")

    page.select_option("#matrix-group", "method")
    groups = page.locator("#matrix-grid .group")
    expect(groups).to_have_count(3)
    labels = _texts(page, "#matrix-grid .group-label .group-name")
    assert labels == ["method = fft", "method = conv", "method = attn"]
    expect(groups.first.locator(".group-count")).to_contain_text("400 entries")
    assert cells.count() == 1200
    conv = page.locator('#matrix-grid .group[data-group="conv"] .cell')
    assert conv.count() == 400
    assert "method=conv" in (conv.first.get_attribute("title") or "")
    _shot(page, request, "by-method")

    page.select_option("#matrix-group", "lang")
    expect(groups).to_have_count(4)
    page.select_option("#matrix-group", "")
    expect(groups).to_have_count(1)

    page.goto(crowd_url + "#/matrices/sweep")  # six entries: room for a label on each
    _ready(page, "matrix")
    assert _texts(page, "#matrix-grid .cell")[:2] == ["lr=0", "lr=0.1"]
    _shot(page, request, "small")


def test_run_page_says_it_is_loading_then_that_a_running_job_printed_nothing_yet(
    crowd_url: str, page: Page, request: pytest.FixtureRequest
) -> None:
    from playwright.sync_api import expect

    held: list[Route] = []  # the run's first detail waits until released
    page.route("**/api/runs/live-run", lambda route: held.append(route), times=1)
    page.goto(crowd_url + "#/runs/live-run")
    loading = page.locator("#run-loading")
    expect(loading).to_be_visible()
    expect(loading).to_contain_text("loading")
    _shot(page, request, "loading")
    assert len(held) == 1
    held[0].continue_()
    expect(page.locator("#run-state")).to_have_text("running")
    expect(loading).to_be_hidden()
    empty = page.locator("#log-empty")
    expect(empty).to_be_visible()
    expect(empty).to_contain_text("no output yet")
    expect(empty).to_contain_text("compiling")
    _shot(page, request, "no-output")

    page.goto(crowd_url + "#/runs/bad-run")  # ended, nothing kept: it says so, not blank
    _ready(page, "run")
    expect(page.locator("#log-empty")).to_contain_text("no output")
    expect(page.locator("#run-meta")).to_contain_text("exit 3")


def test_log_lines_are_coloured_by_level_not_by_stream(
    crowd_url: str, page: Page, request: pytest.FixtureRequest
) -> None:
    from playwright.sync_api import expect

    page.goto(f"{crowd_url}#/runs/{LOG_RUN}")
    _ready(page, "run")
    lines = page.locator("#run-logs .log-line")
    expect(lines).to_have_count(len(LOG_LINES))
    got = page.eval_on_selector_all(
        "#run-logs .log-line",
        "els => els.map(e => [e.textContent, (e.className.match(/lvl-(\\w+)/) || ['', ''])[1]])",
    )
    assert got == [[line.text, line.level] for line in LOG_LINES]
    colour = "el => getComputedStyle(el).color"
    plain_stderr, plain_stdout = lines.nth(1).evaluate(colour), lines.nth(2).evaluate(colour)
    assert plain_stderr == plain_stdout  # a tcl.jobs line on stderr is not an error
    error = lines.nth(7).evaluate(colour)
    warning = lines.nth(4).evaluate(colour)
    assert len({plain_stdout, error, warning}) == 3
    page.locator("#run-logs").scroll_into_view_if_needed()
    _shot(page, request, "levels")
