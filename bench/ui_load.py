"""Dashboard load: `tcl ui`'s runs and matrix pages in headless Chromium, large vs small.

Two throwaway HOME/state dirs are seeded through tcl's own store and sweep-queue APIs
(bench/_uiseed.py): the large one with 2,000 runs in every state (with attempts, some
retried) and a matrix of 1,200 entries in mixed states (`--runs`, `--entries`); the baseline,
measured in the same run, with 20 runs and a matrix of 12. For each, the real
`tcl ui --no-browser --port 0` is started on that state (its first stdout line is the URL with
its token), and Debian's chromium (scripts/testbed/chromium.sh; Playwright drives it, as in
tests/browser.py) loads, in a fresh browser context each time, `#/runs` and
`#/matrices/lr-sweep`, and measures:

- ready: navigation start to `body[data-view=...][data-ready="1"]` (taken in the page by a
  MutationObserver installed before any of the page's scripts, on `performance.now()`, whose
  origin is the navigation's start);
- FCP: `first-contentful-paint` from `performance.getEntriesByType("paint")`;
- heap: `JSHeapUsedSize` from CDP `Performance.getMetrics`, after a forced GC
  (`HeapProfiler.collectGarbage`), once the view is ready;
- filter (runs page only): one keystroke in `#runs-search` (`x`: only the "mixtral" runs have
  one, a fifth) to the next change of `#runs-count`, both taken in the page (the keydown
  event's time, a MutationObserver on the count).

Each figure is the median of `--repeat` loads (5), after one load of each page that is not
counted (it warms the server). Printed: a table of large vs baseline and
the ratio large / baseline per figure, and what each page rendered (rows, cells, the count's
text) as a check that it showed all it should. No target is set yet: the ratios say how the
pages scale with 100x the data.

    uv run --locked python -m bench.ui_load [--runs 2000] [--entries 1200] [--repeat 5]
    uv run --locked python -m bench.ui_load --seed-only DIR [--runs N] [--entries M]
"""

from __future__ import annotations

import argparse
import contextlib
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench._uiseed import FILTER_KEY, Seeded, describe, seed

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

REPO = Path(__file__).resolve().parent.parent
TCL = str(Path(sys.executable).parent / "tcl")
# As tests/browser.py: root cannot use chromium's sandbox; a container's /dev/shm is small.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage"]
TIMEOUT_MS = 120_000  # one page's load, however slow: a figure, not a failure
START_TIMEOUT_S = 60.0

# Runs before the page's own scripts: records when each view first became ready, and (once
# armed) the search field's keydowns and the runs count's changes, all on performance.now().
PROBE = """
(() => {
  const t = (window.__tclBench = {ready: {}, keydown: null, countChanged: null});
  new MutationObserver(() => {
    const b = document.body;
    if (b && b.dataset.ready === "1" && b.dataset.view && !(b.dataset.view in t.ready)) {
      t.ready[b.dataset.view] = performance.now();
    }
  }).observe(document, {attributes: true, subtree: true,
                        attributeFilter: ["data-ready", "data-view"]});
  t.armFilter = () => {
    const input = document.querySelector("#runs-search");
    const count = document.querySelector("#runs-count");
    t.countBefore = count.textContent;
    input.addEventListener("keydown", (e) => { t.keydown = performance.now(); },
                           {capture: true, once: true});
    new MutationObserver(() => {
      if (t.keydown !== null && t.countChanged === null
          && count.textContent !== t.countBefore) {
        t.countChanged = performance.now();
        t.countAfter = count.textContent;
      }
    }).observe(count, {childList: true, characterData: true, subtree: true});
  };
})();
"""


@dataclass
class Load:
    """One page load's figures (ms, MB); ``shown`` says what the page rendered."""

    ready_ms: float
    fcp_ms: float | None
    heap_mb: float
    filter_ms: float | None = None
    shown: str = ""


@dataclass
class Figures:
    loads: list[Load] = field(default_factory=list)

    def median(self, name: str) -> float | None:
        values = [getattr(x, name) for x in self.loads if getattr(x, name) is not None]
        return statistics.median(values) if values else None


# the server ---------------------------------------------------------------------------------


@contextlib.contextmanager
def ui_server(seeded: Seeded) -> Iterator[str]:
    """``tcl ui --no-browser --port 0`` on the seeded state; yields its URL (token included).
    Its stderr (request logs) goes to ``ui.stderr`` in the seeded root, so no pipe fills."""
    log = seeded.root / "ui.stderr"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [TCL, "ui", "--no-browser", "--port", "0"],
            env=seeded.env(),
            cwd=seeded.root,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_drain, args=(proc, lines), daemon=True).start()
    try:
        try:
            url = lines.get(timeout=START_TIMEOUT_S).strip()
        except queue.Empty:
            raise SystemExit(f"tcl ui printed no URL in {START_TIMEOUT_S:.0f} s") from None
        if not url.startswith("http://127.0.0.1:"):
            _stop(proc)
            raise SystemExit(f"tcl ui's first line is not its URL: {url!r}\n{log.read_text()}")
        yield url
    finally:
        _stop(proc)


def _drain(proc: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    """Every stdout line into ``lines`` (the first is the URL; EOF: an empty line)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)
    lines.put("")


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # its Ctrl-C: a clean stop
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stop_daemon(seeded: Seeded) -> None:
    """A ``tcl serve`` the dashboard may have started on this state goes with it."""
    from tcl.control.daemon.client import stop_daemon

    if (seeded.state / "serve" / "daemon.sock").exists():
        stop_daemon(seeded.state / "serve")


# the browser ---------------------------------------------------------------------------------


def chromium_path() -> str:
    out = subprocess.run(
        ["bash", str(REPO / "scripts" / "testbed" / "chromium.sh")],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def _open(page: Page, url: str, view: str) -> float:
    """Navigate to ``url``; the ms from navigation start to ``view`` ready."""
    page.goto(url, wait_until="commit")
    page.wait_for_function(
        f"() => window.__tclBench && '{view}' in window.__tclBench.ready", timeout=TIMEOUT_MS
    )
    return float(page.evaluate(f"() => window.__tclBench.ready['{view}']"))


def _fcp(page: Page) -> float | None:
    found = page.evaluate(
        "() => performance.getEntriesByType('paint')"
        ".filter(e => e.name === 'first-contentful-paint').map(e => e.startTime)"
    )
    return float(found[0]) if found else None


def _heap_mb(page: Page) -> float:
    cdp = page.context.new_cdp_session(page)
    try:
        cdp.send("HeapProfiler.enable")
        cdp.send("HeapProfiler.collectGarbage")
        cdp.send("Performance.enable")
        metrics = cdp.send("Performance.getMetrics")["metrics"]
    finally:
        cdp.detach()
    used = next(m["value"] for m in metrics if m["name"] == "JSHeapUsedSize")
    return float(used) / 2**20


def _filter_ms(page: Page) -> tuple[float | None, str]:
    """One keystroke in the search field to the next change of the runs count."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    page.evaluate("() => window.__tclBench.armFilter()")
    page.focus("#runs-search")
    page.keyboard.press(FILTER_KEY)
    try:
        page.wait_for_function("() => window.__tclBench.countChanged !== null", timeout=10_000)
    except PlaywrightTimeoutError:
        return None, "count did not change"
    t: dict[str, Any] = page.evaluate(
        "() => { const t = window.__tclBench;"
        " return {k: t.keydown, c: t.countChanged, before: t.countBefore, after: t.countAfter}; }"
    )
    return float(t["c"]) - float(t["k"]), f"count {t['before']!r} -> {t['after']!r}"


def load_runs(browser: Browser, url: str) -> Load:
    with _context_page(browser) as page:
        ready = _open(page, f"{url}#/runs", "runs")
        rows = page.locator("table#runs tr[data-run-id]").count()
        load = Load(ready, _fcp(page), _heap_mb(page))
        load.filter_ms, change = _filter_ms(page)
        load.shown = f"{rows} rows; {change}"
        return load


def load_matrix(browser: Browser, url: str, matrix: str) -> Load:
    with _context_page(browser) as page:
        ready = _open(page, f"{url}#/matrices/{matrix}", "matrix")
        cells = page.locator("#matrix-grid div.cell[data-index]").count()
        counts = page.text_content("#matrix-counts") or ""
        shown = f"{cells} cells; counts {' '.join(counts.split())!r}"
        return Load(ready, _fcp(page), _heap_mb(page), shown=shown)


@contextlib.contextmanager
def _context_page(browser: Browser) -> Iterator[Page]:
    """A fresh context (no cache, no cookie: the URL's token logs in each time)."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.add_init_script(PROBE)
        yield page
    finally:
        context.close()


# the run --------------------------------------------------------------------------------------


def measure(browser: Browser, seeded: Seeded, repeat: int) -> dict[str, Figures]:
    runs, matrix = Figures(), Figures()
    try:
        with ui_server(seeded) as url:
            # a first load of each page, not counted: the server's first requests import and
            # warm what later ones reuse, and that is not what a user's page load costs
            load_runs(browser, url)
            load_matrix(browser, url, seeded.matrix)
            for _ in range(repeat):
                runs.loads.append(load_runs(browser, url))
                matrix.loads.append(load_matrix(browser, url, seeded.matrix))
    finally:
        _stop_daemon(seeded)
    return {"runs": runs, "matrix": matrix}


ROWS = [
    ("ready", "ready_ms", "ms"),
    ("FCP", "fcp_ms", "ms"),
    ("JS heap", "heap_mb", "MB"),
    ("filter keystroke", "filter_ms", "ms"),
]


def report(large: dict[str, Figures], base: dict[str, Figures], sizes: tuple[str, str]) -> None:
    print(f"\n{'page':<8}{'figure':<18}{sizes[0]:>16}{sizes[1]:>16}{'ratio':>9}")
    for page in ("runs", "matrix"):
        for label, name, unit in ROWS:
            big, small = large[page].median(name), base[page].median(name)
            if big is None and small is None:
                continue
            ratio = f"{big / small:.2f}x" if big is not None and small else "-"
            cells = [f"{v:.1f} {unit}" if v is not None else "-" for v in (big, small)]
            print(f"{page:<8}{label:<18}{cells[0]:>16}{cells[1]:>16}{ratio:>9}")
    print("\nrendered (last load):")
    for page in ("runs", "matrix"):
        print(f"  {page:<7} large: {large[page].loads[-1].shown}")
        print(f"  {'':<7} base:  {base[page].loads[-1].shown}")


def main() -> None:
    ap = argparse.ArgumentParser(description="tcl ui load benchmark (see the module docstring)")
    ap.add_argument("--runs", type=int, default=2000, help="runs in the large store")
    ap.add_argument("--entries", type=int, default=1200, help="entries of the large matrix")
    ap.add_argument("--base-runs", type=int, default=20)
    ap.add_argument("--base-entries", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=5, help="loads per page (the median is shown)")
    ap.add_argument(
        "--seed-only",
        type=Path,
        metavar="DIR",
        help="only seed the large store into DIR (kept) and say how to use it",
    )
    ap.add_argument("--keep", action="store_true", help="keep the seeded temp dirs")
    args = ap.parse_args()
    if args.seed_only is not None:
        if args.seed_only.exists() and any(args.seed_only.iterdir()):
            raise SystemExit(f"{args.seed_only} is not empty")
        for line in describe(seed(args.seed_only, args.runs, args.entries)):
            print(line)
        return

    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp(prefix="tcl-bench-ui-"))
    try:
        large = seed(tmp / "large", args.runs, args.entries)
        base = seed(tmp / "base", args.base_runs, args.base_entries)
        for s in (large, base):
            print("\n".join(describe(s)))
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=chromium_path(), args=CHROMIUM_ARGS, headless=True
            )
            try:
                print(f"chromium {browser.version}, {args.repeat} loads per page")
                figures_large = measure(browser, large, args.repeat)
                figures_base = measure(browser, base, args.repeat)
            finally:
                browser.close()
        sizes = (f"{args.runs}r/{args.entries}e", f"{args.base_runs}r/{args.base_entries}e")
        report(figures_large, figures_base, sizes)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
