"""A report open in a Chromium tab, as the browser tests see it (``conftest.open_report``
opens them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "report"
"""Screenshots of every page the tests open (CI keeps this folder)."""


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
