"""Waiting ranks in the report's grid: a consequence names ranks that are blocked behind
its cause, not at fault (``waiting_ranks``). Selecting it marks their rows and cells in a
style of their own (amber), never as culprits (red), so a finding whose ranks all wait
still shows where it is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fr_otel.report.build import build_report
from fr_otel.report.html import render_html
from fr_otel.sim import FleetSpec, simulate, write_fleet
from tests.browser.pages import OpenedPage

DATA = Path(__file__).resolve().parents[1] / "data"
RED = (214, 39, 40)
AMBER = (224, 138, 0)


def _close(colour: tuple[int, int, int], expected: tuple[int, int, int], slack: int = 30) -> bool:
    return all(abs(a - b) <= slack for a, b in zip(colour, expected, strict=True))


def _write(tmp_path: Path, source: Path, name: str) -> tuple[Path, Any]:
    report = build_report(source)
    page = tmp_path / f"{name}.html"
    page.write_text(render_html(report))
    return page, report


def _outline_colour(opened: OpenedPage, mark: dict[str, Any]) -> tuple[int, int, int]:
    """The colour drawn over a marked cell's top edge (where its outline is)."""
    box = opened.page.evaluate("([r, c]) => frReport.cellBox(r, c)", [mark["row"], mark["col"]])
    assert box is not None, mark
    return opened.pixel(box["x"] + box["w"] / 2, box["y"] - 1)


def _assert_waiting_shown(opened: OpenedPage, index: int, finding: Any) -> dict[str, Any]:
    assert opened.page.evaluate(f"frReport.selectFinding({index})") is True
    frame = opened.frame()
    assert frame["finding"] == index
    waiting = sorted(set(finding.waiting_ranks) - set(finding.culprit_ranks))
    assert sorted(frame["waitingRows"]) == waiting, frame
    assert sorted(frame["culpritRows"]) == sorted(finding.culprit_ranks), frame
    assert not set(frame["culpritRows"]) & set(waiting)
    marks = frame["waitingMarks"]
    assert marks, f"no cell of finding [{index}]'s waiting ranks is marked: {frame}"
    assert {m["rank"] for m in marks} <= set(waiting)
    for mark in marks[:3]:
        colour = _outline_colour(opened, mark)
        assert _close(colour, AMBER), (mark, colour)
        assert not _close(colour, RED), (mark, colour)
    # their row labels say so, in the waiting style, never as culprits
    frame = opened.frame()
    labelled = {r for label in frame["labels"] if label.get("waiting") for r in label["ranks"]}
    assert labelled and labelled <= set(waiting), frame["labels"]
    assert all(
        not (set(label["ranks"]) & set(waiting)) for label in frame["labels"] if label["culprit"]
    )
    return frame


def test_a_consequence_whose_ranks_all_wait_marks_them_as_waiting(
    tmp_path: Path, open_report: Any
) -> None:
    # rank 3 skipped its pair's all_reduce (the root); rank 1, left waiting in the pair,
    # never issued default_pg's next collective: a consequence with no culprit
    page, report = _write(tmp_path, DATA / "workload_subgroups_skip", "waiting_subgroups")
    root, consequence = report.analysis.findings
    assert (root.culprit_ranks, consequence.culprit_ranks) == ([3], [])
    assert consequence.waiting_ranks == [1] and consequence.consequence_of == 0
    opened = open_report(page)
    assert opened.errors == []

    # on the canvas: rank 1's gap at default_pg #8 (where it never issued the collective its
    # peers wait in) is outlined in amber once the consequence is selected
    assert opened.page.evaluate("frReport.selectFinding(1)") is True
    cell = opened.page.evaluate(f"frReport.find(1, '0', {consequence.collective_seq_id})")
    assert cell is not None and cell["kind"] == "missing", cell
    colour = _outline_colour(opened, cell)
    assert _close(colour, AMBER), colour
    assert opened.page.evaluate("frReport.selectFinding(0)") is True

    # the root: rank 3 in red, nobody waiting
    frame = opened.frame()
    assert (frame["finding"], frame["culpritRows"], frame["waitingRows"]) == (0, [3], [])
    assert frame["waitingMarks"] == []

    frame = _assert_waiting_shown(opened, 1, consequence)
    assert frame["view"] == "group:default_pg" and frame["culpritMarks"] == []
    assert [m["rank"] for m in frame["waitingMarks"]] == [1]
    legend = opened.page.inner_text("#legend")
    assert "waiting (not at fault)" in legend and "culprit (at fault)" in legend
    # the findings list says who waits, and nests the consequence under its cause
    item = opened.page.locator('#findings li:has(a[data-finding="1"])')
    assert "culprit ranks: none; waiting (not at fault): 1" in item.inner_text()
    indents = opened.page.evaluate(
        """[...document.querySelectorAll("#findings li")].map(
            li => li.querySelector("a").getBoundingClientRect().left)"""
    )
    assert indents[1] > indents[0], indents
    assert opened.errors == []
    opened.screenshot("waiting_subgroups")


def test_waiting_ranks_of_a_simulated_network_fault(tmp_path: Path, open_report: Any) -> None:
    # a network fault: nobody is to blame, and every dp group's first rank waits in
    # default_pg behind the stuck collective
    fleet = simulate(FleetSpec(world=32, entries=300, fault="network", seed=3))
    dumps = tmp_path / "dumps"
    write_fleet(fleet, dumps)
    page, report = _write(tmp_path, dumps, "waiting_network")
    waiting = [
        (i, f)
        for i, f in enumerate(report.analysis.findings)
        if f.waiting_ranks and not f.culprit_ranks
    ]
    assert waiting, [(f.kind, f.culprit_ranks, f.waiting_ranks) for f in report.analysis.findings]
    opened = open_report(page)
    for index, finding in waiting:
        frame = _assert_waiting_shown(opened, index, finding)
        assert len(frame["waitingMarks"]) == len(finding.waiting_ranks)
    assert opened.errors == []
    opened.screenshot("waiting_network")
