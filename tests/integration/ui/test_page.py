"""The page in a real headless Chromium (Debian's, installed by chromium.sh), against the real
``tcl ui``: each view reaches ``data-ready="1"`` with the elements of its DOM contract, and the
strings it shows are escaped."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def dom(url: str, tmp_path: Path, chromium: str) -> str:
    out = subprocess.run(
        [
            chromium,
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert "<body" in out.stdout, out.stderr[-2000:]
    return out.stdout


def body(html: str) -> dict[str, str]:
    tag = re.search(r"<body([^>]*)>", html)
    assert tag is not None
    return dict(re.findall(r'data-([a-z]+)="([^"]*)"', tag.group(1)))


def test_views_render_their_contract(page_url: str, tmp_path: Path, chromium_path: str) -> None:
    runs = dom(page_url + "#/runs", tmp_path, chromium_path)
    assert body(runs) == {"view": "runs", "ready": "1"}
    rows = re.findall(r'<tr data-run-id="([^"]+)" data-state="([^"]+)">', runs)
    assert sorted(rows) == [
        ("bad-run", "failed"),
        ("live-run", "running"),
        ("ok-run", "succeeded"),
        ("wait-run", "pending"),
    ]
    assert runs.count('<td class="state') == 4 and 'href="#/runs/ok-run"' in runs
    assert 'id="runs-search"' in runs and 'id="runs-state"' in runs
    assert re.search(r'id="runs-count">4/4<', runs)
    assert runs.count('class="stop"') == 2  # the live runs, with --allow-actions
    assert "&lt;b&gt;waiting&lt;/b&gt;" in runs and "<b>waiting" not in runs

    run = dom(page_url + "#/runs/ok-run", tmp_path, chromium_path)
    assert body(run) == {"view": "run", "ready": "1"}
    assert re.search(r'id="run-state"[^>]*>succeeded<', run)
    assert 'id="stop-run"' not in run  # it ended
    charts = dict(re.findall(r'<div class="chart" data-metric="([^"]+)" data-points="(\d+)"', run))
    assert charts == {"loss": "4", "lr": "3"}  # val_loss joins loss: train vs val
    lines = re.findall(r'<div class="log-line[^"]*" data-node="0">([^<]*)</div>', run)
    assert lines == ["hello", "&lt;warn&gt;"]
    assert 'id="run-spec"' in run and "train.py" in run and 'id="attempts"' in run
    # its attempt's time to first step, a bar of its phases, and its goodput
    bar = re.findall(r'<span class="seg seg-[a-z_]+" data-phase="([a-z_]+)"', run)
    assert bar == ["waited", "runner_ready", "job_started", "compiled", "first_step"], bar
    assert re.search(r'id="goodput"[^>]*>goodput \d+\.\d%<', run)
    assert 'id="log-scale"' in run and 'id="overlay-run"' in run and 'id="overlay-add"' in run

    live = dom(page_url + "#/runs/live-run", tmp_path, chromium_path)
    assert 'id="stop-run"' in live and re.search(r'id="run-state"[^>]*>running<', live)

    matrices = dom(page_url + "#/matrices", tmp_path, chromium_path)
    assert body(matrices) == {"view": "matrices", "ready": "1"}
    assert '<tr data-matrix-id="sweep">' in matrices

    matrix = dom(page_url + "#/matrices/sweep", tmp_path, chromium_path)
    assert body(matrix) == {"view": "matrix", "ready": "1"}
    cells = re.findall(r'<div class="cell[^"]*" data-index="(\d+)" data-state="([a-z]+)"', matrix)
    assert [s for _, s in cells] == ["done", "done", "failed", "failed", "running", "queued"]
    assert 'id="matrix-counts"' in matrix and 'id="matrix-eta"' in matrix
    assert 'id="requeue-failed"' in matrix

    hosts = dom(page_url + "#/hosts", tmp_path, chromium_path)
    assert body(hosts) == {"view": "hosts", "ready": "1"}
    assert re.search(r'<tr data-host="deadbox" data-reachable="unreachable">', hosts)
