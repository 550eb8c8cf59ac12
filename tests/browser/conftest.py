"""A real Chromium (Debian's ``chromium`` package), driven by Playwright, for the HTML report.

``make test`` installs the package when it is missing; without it these tests fail with
the command that installs it, they do not skip.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "report"
"""Screenshots of every page the tests open (CI keeps this folder)."""


def chromium_path() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail(
            "the browser tests need Debian's chromium: apt-get install chromium"
            " (make test installs it)",
            pytrace=False,
        )
    return found


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
        launched = playwright.chromium.launch(
            executable_path=chromium_path(), args=["--no-sandbox"]
        )
        yield launched
        launched.close()


@dataclass
class OpenedPage:
    """A report open in a tab, with everything the page did while loading."""

    page: Any
    console: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def frame(self) -> dict[str, Any]:
        result: dict[str, Any] = self.page.evaluate("frReport.frame()")
        return result

    def pixel(self, x: float, y: float) -> tuple[int, int, int]:
        """The grid canvas's colour at page coordinates (x, y)."""
        rgba = self.page.evaluate(
            """([x, y]) => {
                const canvas = document.getElementById("grid");
                const box = canvas.getBoundingClientRect();
                const dpr = window.devicePixelRatio || 1;
                return [...canvas.getContext("2d").getImageData(
                    Math.round((x - box.left) * dpr), Math.round((y - box.top) * dpr), 1, 1).data];
            }""",
            [x, y],
        )
        return int(rgba[0]), int(rgba[1]), int(rgba[2])

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


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
