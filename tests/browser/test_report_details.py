"""The report's small defects, each checked in headless Chromium:
findings numbered once, position counts that agree with the grid shown, no tooltip left
over from another view, a healthy report opened at its newest columns, row labels that
never overlap (1,024 ranks), and summaries that agree in number."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from fr_otel.report.build import build_report
from fr_otel.report.html import render_html
from fr_otel.sim import FleetSpec, simulate, write_fleet
from tests.browser.pages import OpenedPage
from tests.fr_dumps import fr_dump, fr_entry, write_pickle

DATA = Path(__file__).resolve().parents[1] / "data"


def _sim_report(folder: Path, spec: FleetSpec) -> tuple[Path, Any]:
    dumps = folder / "dumps"
    write_fleet(simulate(spec), dumps)
    report = build_report(dumps)
    page = folder / "report.html"
    page.write_text(render_html(report))
    return page, report


@pytest.fixture(scope="module")
def missing_32(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """32 simulated ranks, rank 16 never issues a collective: a root and consequences,
    one of them naming several ranks, and per-group views of different widths."""
    folder = tmp_path_factory.mktemp("missing_32")
    return _sim_report(folder, FleetSpec(world=32, entries=300, fault="missing_rank", seed=0))


@pytest.fixture(scope="module")
def healthy_32(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    folder = tmp_path_factory.mktemp("healthy_32")
    return _sim_report(folder, FleetSpec(world=32, entries=300, fault="none", seed=0))


@pytest.fixture(scope="module")
def fleet_1024(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """1,024 simulated ranks (short buffers: the rows are what matters here)."""
    folder = tmp_path_factory.mktemp("fleet_1024")
    return _sim_report(
        folder, FleetSpec(world=1024, entries=40, fault="skipped_collective", seed=0)
    )


def _scroll_state(opened: OpenedPage) -> dict[str, float]:
    result: dict[str, float] = opened.page.evaluate(
        """(() => { const s = document.getElementById("grid-scroll");
            return {left: s.scrollLeft, top: s.scrollTop, width: s.scrollWidth,
                    client: s.clientWidth}; })()"""
    )
    return result


def _assert_labels_apart(frame: dict[str, Any], where: str) -> None:
    """No two row labels drawn share a pixel row (their inked boxes, as measured)."""
    labels = sorted(frame["labels"], key=lambda label: label["top"])
    assert labels, f"{where}: no row label drawn"
    for above, below in itertools.pairwise(labels):
        assert above["bottom"] <= below["top"], f"{where}: {above} overlaps {below}"


# --- findings are numbered once ---------------------------------------------------------


def test_findings_are_numbered_once(missing_32: tuple[Path, Any], open_report: Any) -> None:
    page, report = missing_32
    opened = open_report(page)
    items = opened.page.evaluate(
        """[...document.querySelectorAll("#findings li")].map(li => {
            const style = getComputedStyle(li);
            const numbered = li.parentElement.tagName === "OL" && style.display === "list-item"
              && !["none", "disc", "circle", "square"].includes(style.listStyleType);
            return {numbered, text: li.innerText};
        })"""
    )
    assert len(items) == len(report.analysis.findings) >= 2
    for index, item in enumerate(items):
        by_text = item["text"].startswith(f"[{index}] ")
        # "[1] ... consequence of [0]" refers to findings by that number: it must show once
        assert by_text, item
        assert not item["numbered"], f"numbered twice: a list number and [{index}]: {item}"
    opened.screenshot("findings_numbered_once")


# --- position counts agree with the grid ------------------------------------------------


def test_position_counts_agree_with_each_view(
    missing_32: tuple[Path, Any], open_report: Any
) -> None:
    page, report = missing_32
    grid = report.grid
    assert sum(grid.columns_total_by_desc.values()) == grid.columns_total
    opened = open_report(page)
    views = opened.page.evaluate("frReport.views()")
    assert len({v["cols"] for v in views}) > 1, "views of different widths"
    for view in views:
        opened.page.select_option("#view", view["id"])
        frame = opened.frame()
        note = opened.page.inner_text("#window-note")
        found = re.match(r"(\d+)(?: of (\d+))? (?:\S+ )?schedule positions", note)
        assert found is not None, note
        counted = [int(n) for n in found.groups() if n is not None]
        # the first number is what the grid shows, as its own header says
        assert counted[0] == frame["cols"] == view["cols"], (view, note)
        header = f"{frame['rows']} rows × {frame['cols']} columns"
        assert frame["header"] == header, (frame["header"], header)
        if view["id"] == "all":
            total = grid.columns_total
        else:
            total = grid.columns_total_by_desc[view["id"].removeprefix("group:")]
        if total > view["cols"]:
            assert counted[1] == total, (view, note)
        else:
            assert len(counted) == 1, (view, note)


# --- the tooltip goes with the view it was about ----------------------------------------


def test_tooltip_does_not_survive_a_view_switch(
    missing_32: tuple[Path, Any], open_report: Any
) -> None:
    page, _ = missing_32
    opened = open_report(page)
    mark = opened.frame()["culpritMarks"][0]
    box = opened.page.evaluate("([r, c]) => frReport.cellBox(r, c)", [mark["row"], mark["col"]])
    opened.page.mouse.move(box["x"] + box["w"] / 2, box["y"] + box["h"] / 2)
    tooltip = opened.page.locator("#tooltip")
    assert tooltip.is_visible()
    before = tooltip.inner_text()
    # the keyboard or the select's own popup: the pointer stays where it was
    opened.page.select_option("#view", "all")
    assert opened.frame()["view"] == "all"
    assert not tooltip.is_visible(), f"still showing {before!r} over another view"
    # and it comes back for whatever is under the pointer once it moves
    opened.page.mouse.move(box["x"] + box["w"] / 2 + 1, box["y"] + box["h"] / 2)
    opened.frame()
    assert opened.errors == []


def test_tooltip_goes_when_the_grid_scrolls(missing_32: tuple[Path, Any], open_report: Any) -> None:
    page, report = missing_32
    opened = open_report(page)
    opened.page.select_option("#view", "all")  # wider than the page: it scrolls
    # an entry in the newest column, scrolled into view, under the pointer
    cells = report.grid.cells
    last = len(report.grid.columns) - 1
    row = next(r for r, c in zip(cells["row"], cells["col"], strict=True) if c == last)
    box = opened.page.evaluate("([r, c]) => frReport.cellBox(r, c)", [row, last])
    opened.page.mouse.move(box["x"] + box["w"] / 2, box["y"] + box["h"] / 2)
    assert opened.page.locator("#tooltip").is_visible()
    # a scroll is reported a frame late: one from before the tooltip showed is no move
    still = opened.page.evaluate(
        """async ([x, y]) => {
            const grid = document.getElementById("grid-scroll");
            const before = grid.scrollLeft;
            grid.scrollLeft -= 50;  // the pointer follows the cell: the same text
            const moved = before - grid.scrollLeft;
            grid.dispatchEvent(new MouseEvent("mousemove", {clientX: x + moved, clientY: y}));
            for (let k = 0; k < 3; k++) await new Promise(done => requestAnimationFrame(done));
            return !document.getElementById("tooltip").hidden;
        }""",
        [box["x"] + box["w"] / 2, box["y"] + box["h"] / 2],
    )
    assert still, "the tooltip went with a scroll from before it showed"
    hidden = opened.page.evaluate(
        """async () => {
            document.getElementById("grid-scroll").scrollLeft -= 100;
            for (let k = 0; k < 3; k++) await new Promise(done => requestAnimationFrame(done));
            return document.getElementById("tooltip").hidden;
        }"""
    )
    assert hidden, "the tooltip still describes the cell that scrolled away"


# --- a healthy report opens where the action is: the newest columns --------------------


def test_a_healthy_report_opens_at_its_newest_columns(
    healthy_32: tuple[Path, Any], open_report: Any
) -> None:
    page, report = healthy_32
    assert report.analysis.healthy
    opened = open_report(page)
    frame = opened.frame()
    scroll = _scroll_state(opened)
    assert scroll["width"] > scroll["client"] + 100, "the view must be wider than the page"
    # the last column (the newest position) is on screen, and the scroll is at its end
    assert frame["lastColumn"] == frame["cols"] - 1, frame
    assert scroll["left"] + scroll["client"] >= scroll["width"] - 1, scroll
    # the same for a view chosen later
    for view in opened.page.evaluate("frReport.views()"):
        opened.page.select_option("#view", view["id"])
        frame = opened.frame()
        assert frame["lastColumn"] == frame["cols"] - 1, (view, frame)
    opened.screenshot("healthy_newest_columns")


def test_a_view_without_the_finding_opens_at_its_newest_columns(
    missing_32: tuple[Path, Any], open_report: Any
) -> None:
    page, report = missing_32
    opened = open_report(page)
    root = report.analysis.findings[report.analysis.root_cause]
    frame = opened.frame()
    assert frame["focusColumn"] >= 0  # the root's view opens at the root's column
    assert frame["firstColumn"] <= frame["focusColumn"] <= frame["lastColumn"], frame
    other = next(
        v
        for v in opened.page.evaluate("frReport.views()")
        if v["id"] not in ("all", f"group:{root.group.desc}") and v["cols"] > 60
    )
    opened.page.select_option("#view", other["id"])
    frame = opened.frame()
    assert frame["lastColumn"] == frame["cols"] - 1, frame


# --- row labels never overlap -----------------------------------------------------------


def test_row_labels_do_not_overlap_at_1024_ranks(
    fleet_1024: tuple[Path, Any], open_report: Any
) -> None:
    page, report = fleet_1024
    culprit = sorted(report.analysis.findings[report.analysis.root_cause].culprit_ranks)
    opened = open_report(page)
    frame = opened.frame()
    assert frame["rows"] == 1024 and frame["rowHeight"] < 10, frame  # compact rows
    _assert_labels_apart(frame, frame["view"])
    # the culprit's row is in view at the start, and labelled
    culprit_labels = [label for label in frame["labels"] if label["culprit"]]
    assert [label["ranks"] for label in culprit_labels] == [culprit], culprit_labels
    # every view, at the culprit and scrolled elsewhere
    for view in opened.page.evaluate("frReport.views()"):
        opened.page.select_option("#view", view["id"])
        _assert_labels_apart(opened.frame(), view["id"])
        opened.page.evaluate("document.getElementById('grid-scroll').scrollTop += 333")
        _assert_labels_apart(opened.frame(), f"{view['id']}, scrolled")
    opened.page.select_option("#zoom", "normal")
    _assert_labels_apart(opened.frame(), "normal rows")
    opened.page.select_option("#view", "all")
    opened.page.select_option("#zoom", "compact")
    opened.page.evaluate("frReport.selectFinding(0)")
    _assert_labels_apart(opened.frame(), "all groups, compact, at the culprit")
    assert opened.errors == []
    opened.screenshot("labels_1024")


def test_adjacent_culprit_rows_share_one_label(tmp_path: Path, open_report: Any) -> None:
    """Five neighbouring culprits among 256 compact rows: one label names them all."""
    folder = tmp_path / "dumps"
    pg_config = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(256)))}}
    culprits = [100, 101, 102, 103, 104]
    for rank in range(256):
        entries = [fr_entry(record_id=i, seq=i + 1, state="completed") for i in range(3)]
        if rank in culprits:
            entries[2]["input_sizes"] = entries[2]["output_sizes"] = [[5, 8]]
        write_pickle(folder / f"nccl_trace_rank_{rank}", fr_dump(entries, pg_config=pg_config))
    report = build_report(folder)
    assert sorted(report.analysis.findings[report.analysis.root_cause].culprit_ranks) == culprits
    page = tmp_path / "report.html"
    page.write_text(render_html(report))
    opened = open_report(page)
    frame = opened.frame()
    assert frame["rowHeight"] < 10, frame
    _assert_labels_apart(frame, "256 rows")
    culprit_labels = [label for label in frame["labels"] if label["culprit"]]
    assert [label["ranks"] for label in culprit_labels] == [culprits], culprit_labels
    assert "100" in culprit_labels[0]["text"] and "104" in culprit_labels[0]["text"]
    assert sorted(frame["culpritRows"]) == culprits
    opened.screenshot("adjacent_culprits")


# --- summaries agree in number ----------------------------------------------------------


def test_summaries_agree_in_number(missing_32: tuple[Path, Any], open_report: Any) -> None:
    page, _ = missing_32
    opened = open_report(page)
    text = opened.page.inner_text("#findings") + "\n" + opened.page.inner_text("#verdict")
    several = re.findall(r"ranks [\d, ]+ never issued [^\n]*?, which (\w+) peers", text)
    one = re.findall(r"rank \d+ never issued [^\n]*?, which (\w+) peers", text)
    assert several and one, text
    assert set(several) == {"their"}, several
    assert set(one) == {"its"}, one
