"""Fixtures that drive pages in a real headless browser (Playwright's sync API).

The browser is Debian's chromium, installed by ``scripts/testbed/chromium.sh`` when missing
(Playwright cannot download its own browsers here); Playwright's Python wheel brings the node
driver that talks to it. One browser serves the whole session; each test gets a fresh context
(cookies, storage) and page. When a test ends, its page is saved as a screenshot, and what the
page logged (console errors and warnings, uncaught exceptions) next to it, under
``test-artefacts/ui/`` at the repository root (gitignored), for the developers to look at.

Mark such tests ``@pytest.mark.browser``. This module is a pytest plugin (``tests/conftest.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.testbed import REPO, run_script

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Error, Page

ARTEFACTS = REPO / "test-artefacts" / "ui"
# Root (CI) cannot use chromium's sandbox; a container's small /dev/shm would crash its renderer.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-dev-shm-usage"]
# Playwright's default (30 s) makes a missing element a long wait; pages here are local.
TIMEOUT_MS = 15_000


def artefact_path(test_name: str, suffix: str) -> Path:
    """``test-artefacts/ui/<test name><suffix>``, the name made safe for a file name
    (parametrized ids keep their brackets' content)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name).strip("_")
    return ARTEFACTS / f"{safe}{suffix}"


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """The chromium executable (installed with apt-get by chromium.sh if missing)."""
    return run_script("chromium.sh").strip().splitlines()[-1]


@pytest.fixture(scope="module")
def browser(chromium_path: str) -> Iterator[Browser]:
    """One headless chromium per test module, closed (its processes gone) at its end.

    Not one per session: Playwright's sync API keeps its event loop marked running in this
    thread while it is open, and every asyncio test after it would fail ("cannot be called
    from a running event loop")."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(
            executable_path=chromium_path, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A page in a fresh context; on teardown its screenshot goes to
    ``test-artefacts/ui/<test>.png`` and its console errors (if any) to ``<test>.console.txt``."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(TIMEOUT_MS)
    new_page = context.new_page()
    logged: list[str] = []

    def on_console(msg: ConsoleMessage) -> None:
        if msg.type in ("error", "warning"):
            logged.append(f"console.{msg.type}: {msg.text}")

    def on_pageerror(exc: Error) -> None:
        logged.append(f"uncaught: {exc}")

    new_page.on("console", on_console)
    new_page.on("pageerror", on_pageerror)
    try:
        yield new_page
    finally:
        ARTEFACTS.mkdir(parents=True, exist_ok=True)
        from playwright.sync_api import Error as PlaywrightError

        try:
            new_page.screenshot(path=str(artefact_path(request.node.name, ".png")), full_page=True)
        except PlaywrightError as exc:  # a crashed page: keep the test's own outcome
            logged.append(f"no screenshot: {exc}")
        console = artefact_path(request.node.name, ".console.txt")
        if logged:
            console.write_text("\n".join(logged) + "\n")
        else:
            console.unlink(missing_ok=True)
        context.close()
