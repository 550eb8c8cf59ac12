"""The HTML incident report in headless Chromium: it loads from disk with no errors and no
requests, names the culprit in its verdict and marks it in the grid, for every fault
scenario the analyzer is tested on (real gloo dumps and simulated NCCL fleets)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fr_otel.cli import main
from fr_otel.errors import ArchiveError
from fr_otel.report.build import build_report
from fr_otel.report.html import render_html
from fr_otel.sim import FAULT_KINDS, FleetSpec, simulate, write_fleet
from tests.browser.pages import OpenedPage
from tests.fr_dumps import fr_dump, fr_entry, write_pickle

DATA = Path(__file__).resolve().parents[1] / "data"
GLOO = sorted(p for p in DATA.glob("gloo_*") if (p / "scenario.json").is_file())
RED = (214, 39, 40)
MISSING_FILL = (255, 217, 217)
JAEGER = "http://localhost:16686/trace/{trace_id}?uiFind={span_id}"


def _close(colour: tuple[int, int, int], expected: tuple[int, int, int], slack: int = 30) -> bool:
    return all(abs(a - b) <= slack for a, b in zip(colour, expected, strict=True))


def _write(tmp_path: Path, source: Path, name: str, **options: Any) -> tuple[Path, Any]:
    report = build_report(source, **options)
    page = tmp_path / f"{name}.html"
    page.write_text(render_html(report))
    return page, report


def _assert_clean_load(opened: OpenedPage, page: Path) -> None:
    assert opened.errors == [], opened.errors
    noisy = [(kind, text) for kind, text in opened.console if kind in ("error", "warning")]
    assert noisy == [], noisy
    # the file itself, nothing else: no CDN, no font, no beacon
    assert opened.requests == [page.resolve().as_uri()], opened.requests


def _assert_marked_in_grid(opened: OpenedPage, culprits: list[int]) -> None:
    frame = opened.frame()
    assert sorted(frame["culpritRows"]) == culprits, frame
    marks = frame["culpritMarks"]
    assert marks, f"no cell of the finding is outlined: {frame}"
    for mark in marks[:3]:
        box = opened.page.evaluate("([r, c]) => frReport.cellBox(r, c)", [mark["row"], mark["col"]])
        assert box is not None, mark
        # the outline is drawn over the cell's top edge: red on the canvas, not just in data
        colour = opened.pixel(box["x"] + box["w"] / 2, box["y"] - 1)
        assert _close(colour, RED), (mark, colour)


def _check_scenario(
    opened: OpenedPage, culprits: list[int], desc: str | None, seq: int | None
) -> None:
    page = opened.page
    if not culprits and desc is None:
        assert page.inner_text("#verdict h2") == "No problems found"
        assert opened.frame()["culpritMarks"] == []
        return
    verdict = page.inner_text("#verdict")
    if culprits:
        assert page.inner_text("#verdict .culprits") == ", ".join(map(str, culprits))
        _assert_marked_in_grid(opened, culprits)
    else:  # a network fault: nobody to blame, but the stuck collective is still shown
        assert "none named" in verdict
        assert opened.frame()["divergenceLine"] is True
    if desc is not None:
        assert f"{desc} (pg " in verdict
    if seq is not None:
        assert f"#{seq}" in verdict
        assert opened.frame()["divergenceLine"] is True


@pytest.mark.gloo
@pytest.mark.parametrize("folder", GLOO, ids=lambda p: p.name)
def test_real_gloo_fault_verdict_and_grid(folder: Path, tmp_path: Path, open_report: Any) -> None:
    scenario = json.loads((folder / "scenario.json").read_text())["scenario"]
    page, _ = _write(tmp_path, folder, folder.name)
    opened = open_report(page)
    _assert_clean_load(opened, page)
    healthy = scenario["expected_kind"] == "none"
    _check_scenario(
        opened,
        [] if healthy else scenario["culprit_ranks"],
        None if healthy else scenario["pg_desc"],
        None if healthy else scenario["collective_seq_id"],
    )
    assert opened.screenshot(folder.name).stat().st_size > 10_000


@pytest.mark.parametrize("fault", FAULT_KINDS)
@pytest.mark.parametrize(("world", "seed"), [(16, 0), (32, 3)])  # as the analyzer's tests
def test_simulated_fault_verdict_and_grid(
    fault: str, world: int, seed: int, tmp_path: Path, open_report: Any
) -> None:
    fleet = simulate(FleetSpec(world=world, entries=300, fault=fault, seed=seed))
    dumps = tmp_path / "dumps"
    write_fleet(fleet, dumps)
    page, report = _write(tmp_path, dumps, f"sim_{fault}_{world}")
    opened = open_report(page)
    _assert_clean_load(opened, page)
    truth = sorted(fleet.truth.culprit_ranks)
    root = report.analysis.findings[report.analysis.root_cause] if fault != "none" else None
    _check_scenario(
        opened,
        truth,
        None if root is None else (root.group.desc or root.group.name),
        None if root is None else root.collective_seq_id,
    )
    assert opened.screenshot(f"sim_{fault}_{world}").stat().st_size > 10_000


@pytest.mark.gloo
def test_cells_show_their_fields_stack_and_trace(tmp_path: Path, open_report: Any) -> None:
    folder = DATA / "gloo_skipped_collective"
    archive = tmp_path / "archive"
    assert main(["import", str(folder), "--archive", str(archive)]) == 0
    spans_file = tmp_path / "spans.jsonl"
    assert main(["export", str(archive), "--otlp-json", str(spans_file)]) == 0
    page = tmp_path / "report.html"
    code = main(
        ["analyze", str(archive), "--format", "html", "-o", str(page), "--trace-url", JAEGER]
    )
    assert code == 1  # findings
    opened = open_report(page)
    _assert_clean_load(opened, page)

    # hover: a tooltip with the entry; click: its fields, its stack and its trace
    mark = opened.frame()["culpritMarks"][0]
    box = opened.page.evaluate("([r, c]) => frReport.cellBox(r, c)", [mark["row"], mark["col"]])
    x, y = box["x"] + box["w"] / 2, box["y"] + box["h"] / 2
    opened.page.mouse.move(x, y)
    tooltip = opened.page.locator("#tooltip")
    assert tooltip.is_visible()
    assert tooltip.inner_text().startswith("rank 1 · all_gather #7")
    opened.page.mouse.click(x, y)
    details = opened.page.inner_text("#details-body")
    assert "all_gather" in details and "_worker.py" in details, details
    assert "_param_all_gather" in opened.page.inner_text("#details ol.frames")

    # the link holds this entry's ids as `fr-otel export` sent them
    href = opened.page.get_attribute("#trace-link", "href") or ""
    assert href.startswith("http://localhost:16686/trace/"), href
    trace_id = href.split("/trace/")[1].split("?")[0]
    span_id = href.split("uiFind=")[1]
    spans = {}
    for line in spans_file.read_text().splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            rank = next(
                a["value"]["intValue"]
                for a in resource["resource"]["attributes"]
                if a["key"] == "fr_otel.rank"
            )
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    spans[(span["traceId"], span["spanId"])] = (int(rank), span["name"])
    assert spans.get((trace_id, span_id)) == (1, "all_gather")
    assert opened.errors == []
    opened.screenshot("clicked_cell")


@pytest.mark.gloo
def test_missing_and_in_flight_cells_are_drawn(tmp_path: Path, open_report: Any) -> None:
    page, _ = _write(tmp_path, DATA / "gloo_skipped_collective", "skip")
    opened = open_report(page)
    # rank 1 skipped a collective, so it never reached its peers' last one (#9)
    missing = opened.page.evaluate("frReport.find(1, '0', 9)")
    assert missing["kind"] == "missing"
    box = opened.page.evaluate(
        "([r, c]) => frReport.cellBox(r, c)", [missing["row"], missing["col"]]
    )
    # lower-left corner, away from the red stroke across the cell
    assert _close(opened.pixel(box["x"] + 3, box["y"] + box["h"] - 4), MISSING_FILL, 8)
    # gloo never marks its last collectives done: in flight, the cell's lower right is dark
    stuck = opened.page.evaluate("frReport.find(0, '0', 9)")
    assert stuck["kind"] == "entry" and stuck["state"] == "scheduled"
    box = opened.page.evaluate("([r, c]) => frReport.cellBox(r, c)", [stuck["row"], stuck["col"]])
    dark = opened.pixel(box["x"] + box["w"] - 4, box["y"] + box["h"] - 4)
    assert max(dark) < 90, dark
    done = opened.page.evaluate("frReport.find(0, '0', 1)")
    assert done["state"] == "completed"
    box = opened.page.evaluate("([r, c]) => frReport.cellBox(r, c)", [done["row"], done["col"]])
    assert max(opened.pixel(box["x"] + box["w"] - 4, box["y"] + box["h"] - 4)) > 90


@pytest.mark.gloo
def test_views_and_findings_link_to_their_cells(tmp_path: Path, open_report: Any) -> None:
    page, report = _write(tmp_path, DATA / "gloo_skipped_in_subgroup", "subgroup")
    opened = open_report(page)
    # the root cause is in back_group: its view is the one shown first
    assert opened.frame()["view"] == "group:back_group"
    assert opened.frame()["culpritRows"] == [2]

    # the second finding (ranks 1-3 never joined default_pg's collective) is one click away
    opened.page.click('a.finding[data-finding="1"]')
    frame = opened.frame()
    assert frame["view"] == "group:default_pg" and frame["finding"] == 1
    assert sorted(frame["culpritRows"]) == sorted(report.analysis.findings[1].culprit_ranks)

    # every rank once per group it belongs to, in the all-groups view
    opened.page.select_option("#view", "all")
    memberships = sum(group["size"] for group in report.grid.groups)
    assert opened.frame()["rows"] == memberships == 10
    assert opened.errors == []
    opened.screenshot("subgroup_all_view")


def test_a_bad_trace_url_template_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    folder = DATA / "gloo_skipped_collective"
    code = main(["analyze", str(folder), "--format", "html", "--trace-url", "http://x/{id}"])
    assert code == 2
    assert "{trace_id}" in capsys.readouterr().err


def test_text_from_a_dump_cannot_inject_markup(tmp_path: Path, open_report: Any) -> None:
    # group descriptions, op names and file names come from dumps: untrusted text
    hostile = "<img src=x onerror=alert(1)></script><script>alert(2)</script>"
    frames = [{"name": "step", "filename": f"/job/{hostile}.py", "line": 7}]
    pg_config = {"0": {"name": "0", "desc": hostile, "ranks": "[0, 1]"}}
    folder = tmp_path / "dumps"
    for rank in (0, 1):
        entries = [
            fr_entry(record_id=i, seq=i + 1, pg=("0", hostile), state="completed") for i in range(3)
        ]
        if rank == 1:  # rank 1 passes a different size at #3: a finding that quotes the text
            entries[2]["input_sizes"] = entries[2]["output_sizes"] = [[5, 8]]
        for entry in entries:
            entry["frames"] = frames
        write_pickle(folder / f"nccl_trace_rank_{rank}", fr_dump(entries, pg_config=pg_config))
    page, report = _write(tmp_path, folder, "hostile")
    assert report.analysis.findings, "the size mismatch is found"
    opened = open_report(page)
    dialogs: list[str] = []
    opened.page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    opened.page.mouse.move(10, 10)
    _assert_clean_load(opened, page)
    assert hostile in opened.page.inner_text("#verdict")  # shown as text
    assert opened.page.locator("img").count() == 0
    assert dialogs == []


def test_dumps_without_entries_make_no_healthy_page(tmp_path: Path) -> None:
    """Buffers with no entry are no evidence, not a healthy job: no page says "No problems
    found" for them, the reason is given instead (``fr-otel analyze`` exits 2 with it)."""
    folder = tmp_path / "dumps"
    for rank in (0, 1):
        write_pickle(folder / f"nccl_trace_rank_{rank}", fr_dump([]))
    with pytest.raises(ArchiveError, match="none of its 2 Flight Recorder dump"):
        _write(tmp_path, folder, "empty")


def test_a_rank_without_a_dump_is_unknown_in_the_grid(tmp_path: Path, open_report: Any) -> None:
    fleet = simulate(FleetSpec(world=16, entries=300, fault="skipped_collective", seed=0))
    dumps = tmp_path / "dumps"
    write_fleet(fleet, dumps, omit_ranks=(3,))
    page, report = _write(tmp_path, dumps, "omitted")
    assert report.analysis.missing_dumps == [3]
    opened = open_report(page)
    _assert_clean_load(opened, page)
    assert "No dump from ranks 3" in opened.page.inner_text("#verdict")
    root = report.analysis.findings[report.analysis.root_cause or 0]
    assert 3 not in root.culprit_ranks
    # rank 3's cells are drawn as unknown, not as missing (which would blame it)
    desc = root.group.desc
    group = next(
        g["name"] for g in report.grid.groups if g["desc"] == desc and 3 in (g["ranks"] or [])
    )
    seqs = [c.seq for c in report.grid.columns if not c.p2p and c.group_desc == desc]
    cell = opened.page.evaluate(f"frReport.find(3, '{group}', {seqs[-1]})")
    assert cell is not None and cell["kind"] == "nodump", cell
    opened.screenshot("omitted_rank")


def test_past_max_ranks_the_named_ranks_and_a_sample_are_shown(
    tmp_path: Path, open_report: Any
) -> None:
    fleet = simulate(FleetSpec(world=64, entries=300, fault="skipped_collective", seed=0))
    dumps = tmp_path / "dumps"
    write_fleet(fleet, dumps)
    page, report = _write(tmp_path, dumps, "sampled", max_ranks=16)
    grid = report.grid
    shown = {row.rank for row in grid.rows}
    culprits = sorted(fleet.truth.culprit_ranks)
    assert len(shown) <= 16 and set(culprits) <= shown
    assert grid.ranks_total == 64 and grid.rank_step is not None
    assert {0, grid.rank_step} <= shown  # the even sample
    opened = open_report(page)
    _assert_clean_load(opened, page)
    assert f"{len(shown)} of 64 ranks" in opened.page.inner_text("#window-note")
    _assert_marked_in_grid(opened, culprits)
