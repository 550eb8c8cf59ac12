"""The lateness strip of a slow job's report, drawn by a real Chromium: one row of bars
per rank shown, the straggler's in red and taller than its peers', from the real gloo
straggler job under ``tests/data/stragglers_one``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fr_otel.report.build import build_report
from fr_otel.report.html import render_html

DATA = Path(__file__).resolve().parents[1] / "data" / "stragglers_one"

ROWS = """() => [...document.querySelectorAll("#lateness table.lateness tr")].map(tr => {
    const svg = tr.querySelector("svg");
    const box = svg.getBoundingClientRect();
    const bars = [...svg.querySelectorAll("rect")].map(r => r.getBoundingClientRect().height);
    return {
        label: tr.querySelector("th").textContent,
        fill: getComputedStyle(svg).fill,
        width: box.width, height: box.height,
        drawn: bars.reduce((a, b) => a + b, 0), bars: bars.length,
    };
})"""


def test_the_straggler_stands_out_in_the_strip(tmp_path: Path, open_report: Any) -> None:
    truth = json.loads((DATA / "stragglers.json").read_text())
    straggler = int(next(iter(truth["scenario"]["stragglers"])))
    page = tmp_path / "slow.html"
    page.write_text(render_html(build_report(DATA / "archive")))
    opened = open_report(page)
    assert not opened.errors, opened.errors
    assert opened.page.is_visible("#lateness")
    rows = {row["label"]: row for row in opened.page.evaluate(ROWS)}
    assert f"rank {straggler}" in rows, rows
    late = rows.pop(f"rank {straggler}")
    assert late["width"] > 100 and late["height"] > 5 and late["bars"] > 0, late
    assert late["fill"] == "rgb(198, 40, 40)", late  # the straggler's red
    assert rows and all(row["fill"] != late["fill"] for row in rows.values()), rows
    # its bars are drawn taller than any other rank's: 10 ms late against ordinary jitter
    assert all(late["drawn"] > 2 * row["drawn"] for row in rows.values()), (late, rows)
    opened.screenshot("lateness-strip")
