"""A real Chromium (Debian's ``chromium`` package), driven by Playwright, for the HTML report.

``make test`` installs the package when it is missing; without it these tests fail with
the command that installs it, they do not skip.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.pages import OpenedPage


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "the browser tests need Debian's chromium: apt-get install chromium"
            " (make test installs it)",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    # closed after this package's tests: Playwright's sync API holds an event loop
    # running on the main thread while it is open, and every later test that runs one of
    # its own (asyncio.run, anyio.run: the MCP server's) would find it there and fail
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
        launched = playwright.chromium.launch(
            executable_path=chromium_path(), args=["--no-sandbox"]
        )
        yield launched
        launched.close()


@pytest.fixture
def open_report(browser: Any) -> Iterator[Any]:
    pages: list[Any] = []

    def opener(path: Path, *, width: int = 1400, height: int = 1000) -> OpenedPage:
        page = browser.new_page(viewport={"width": width, "height": height})
        pages.append(page)
        opened = OpenedPage(page)
        page.on("console", lambda m: opened.console.append((m.type, m.text)))
        page.on("pageerror", lambda e: opened.errors.append(str(e)))
        page.on("request", lambda r: opened.requests.append(r.url))
        page.goto(path.resolve().as_uri())
        page.wait_for_function("window.frReport && window.frReport.ready", timeout=20_000)
        return opened

    yield opener
    for page in pages:
        page.close()
