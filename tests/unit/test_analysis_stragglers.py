"""Stragglers: real gloo jobs (the committed ``stragglers_*`` fixtures), their dumps with
clocks shifted as another host's would be, and simulated fleets of 64 and 1,024 ranks with
CPU- and GPU-side stragglers, with and without clock skew, against ground truth."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fr_otel.analysis import Analysis, analyze
from fr_otel.analysis import engine as analysis_engine
from fr_otel.analysis.findings import PERFORMANCE_KINDS
from fr_otel.cli import main
from fr_otel.sim import FleetSpec, Straggler, simulate, write_fleet
from tests.stragglers import (
    copy_archive,
    cut_last,
    shift_clock,
    straggler_fixture,
    unfinish_last,
)

TEN_STEPS = 1_200
"""Ring entries that hold over ten of the simulated job's steps (a tensor-parallel rank
records about 90 a step): a straggler must be late at ten separate occasions."""


def _stragglers(analysis: Analysis) -> dict[int, dict]:  # type: ignore[type-arg]
    return {f.culprit_ranks[0]: f.evidence for f in analysis.findings if f.kind == "straggler"}


def _hang_findings(analysis: Analysis) -> list[str]:
    return [f.kind for f in analysis.findings if f.kind not in PERFORMANCE_KINDS]


def test_the_slow_rank_of_a_real_job_is_named_with_its_lateness(
    capsys: pytest.CaptureFixture[str],
) -> None:
    archive, scenario = straggler_fixture("one")
    analysis = analyze(archive)
    assert _hang_findings(analysis) == [] and analysis.root_cause is None
    named = _stragglers(analysis)
    assert list(named) == [2]
    evidence = named[2]
    delay = scenario["scenario"]["stragglers"]["2"]
    assert abs(evidence["lateness_ms"]["median"] - delay) <= 0.2 * delay, evidence
    assert evidence["last_fraction"] >= 0.9 and evidence["confidence"] > 0.999
    assert abs(evidence["time_lost_ms_per_step"] - delay) <= 0.2 * delay, evidence
    assert evidence["side"] == "cpu" and evidence["basis"] == "issue"
    assert evidence["clock"]["estimated"] and evidence["clock"]["uncertainty_ms"] < 1
    # where it was before the collective: the function that calls it, from its stack
    assert "grad_sync" in evidence["example"]["call_site"]
    [finding] = analysis.findings
    assert finding.frames["culprit"]["2"], "the late rank's stack"
    # a snapshot (SIGUSR2), read as one
    assert analysis.snapshot == {"stalled": False, "entries_in_flight_set_aside": 0}
    # a straggler is never called the root cause of anything
    assert main(["analyze", str(archive)]) == 1
    text = capsys.readouterr().out
    assert "ROOT CAUSE" not in text and "root cause" not in text
    assert text.startswith("SLOW, NOT STUCK: rank 2 is late to all_reduce")


def test_clocks_shifted_by_half_a_second_name_the_same_rank_with_the_same_lateness(
    tmp_path: Path,
) -> None:
    archive, _ = straggler_fixture("one")
    before = _stragglers(analyze(archive))[2]
    shifted = copy_archive(archive, tmp_path / "archive")
    # ranks 2 and 3 on another host whose clock runs half a second ahead
    for rank in (2, 3):
        shift_clock(shifted, rank, 500_000_000)
    analysis = analyze(shifted)
    named = _stragglers(analysis)
    assert list(named) == [2] and _hang_findings(analysis) == []
    after = named[2]
    assert abs(after["lateness_ms"]["median"] - before["lateness_ms"]["median"]) < 0.5
    # the offset was estimated (against the members' median clock: midway between the two
    # hosts'), and it is known well
    moved = after["clock"]["offset_ms"] - before["clock"]["offset_ms"]
    assert 249 < moved < 251, after["clock"]
    assert after["clock"]["uncertainty_ms"] < 1


def test_uncorrected_clocks_would_have_blamed_the_shifted_ranks(tmp_path: Path) -> None:
    # the same shift on a rank without completion times cannot be corrected: its lateness
    # is then half a second, which shows the correction above is doing the work
    archive, _ = straggler_fixture("one")
    shifted = copy_archive(archive, tmp_path / "archive")
    shift_clock(shifted, 3, 500_000_000)
    import duckdb

    from fr_otel.analysis.sqlfiles import prepare
    from fr_otel.analysis.stragglers import arrival_query

    connection = duckdb.connect()
    prepare(connection)  # the rules over canonical rows that the query calls
    source = (
        "(SELECT * REPLACE (NULL::BIGINT AS time_completed_ns)"
        f" FROM read_parquet('{shifted}/**/*.parquet', hive_partitioning = true))"
    )
    [(median,)] = connection.execute(
        f"SELECT median(lateness_ns) FROM ({arrival_query(source, 'true')}) WHERE rank = 3"
    ).fetchall()
    assert median > 400_000_000


def test_two_stragglers_are_both_named() -> None:
    archive, scenario = straggler_fixture("two")
    analysis = analyze(archive)
    named = _stragglers(analysis)
    assert sorted(named) == [1, 3] and _hang_findings(analysis) == []
    for rank, delay in scenario["scenario"]["stragglers"].items():
        lateness = named[int(rank)]["lateness_ms"]["median"]
        assert abs(lateness - delay) <= 0.2 * delay, (rank, lateness)
    # the costliest first: only rank 3's delay holds the job up
    assert analysis.findings[0].culprit_ranks == [3]


def test_a_healthy_job_with_random_jitter_has_no_finding() -> None:
    archive, _ = straggler_fixture("jitter")
    analysis = analyze(archive)
    assert analysis.findings == [] and analysis.healthy


def test_the_arrival_view_has_one_row_per_rank_per_collective(
    capsys: pytest.CaptureFixture[str],
) -> None:
    archive, _ = straggler_fixture("one")
    query = (
        "SELECT rank, count(*) AS n, median(lateness_ns) AS late, bool_and(lateness_ns >= 0)"
        " AS positive FROM arrival GROUP BY rank ORDER BY rank"
    )
    assert main(["sql", str(archive), query, "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["rank"] for r in rows] == [0, 1, 2, 3]
    assert len({r["n"] for r in rows}) == 1 and all(r["positive"] for r in rows)
    assert max(rows, key=lambda r: r["late"])["rank"] == 2


def test_a_snapshot_reads_ranks_at_different_points_of_the_loop_as_no_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive, _ = straggler_fixture("one")
    caught = copy_archive(archive, tmp_path / "archive")
    # rank 1 was copied a step earlier than its peers, whose last all_reduce was in flight
    cut_last(caught, 1, 2)
    for rank in (0, 2, 3):
        unfinish_last(caught, rank)
    analysis = analyze(caught)
    assert _hang_findings(analysis) == [], [f.summary for f in analysis.findings]
    assert list(_stragglers(analysis)) == [2]
    assert analysis.snapshot is not None and analysis.snapshot["entries_in_flight_set_aside"] > 0
    # read as an incident, the same buffers are a hang: rank 1 missing from the last ones
    monkeypatch.setattr(analysis_engine.snapshots, "is_snapshot", lambda *_: False)
    as_hang = analyze(caught)
    assert "missing_rank" in _hang_findings(as_hang)
    assert as_hang.root_cause is not None
    assert as_hang.findings[as_hang.root_cause].kind != "straggler"


def _fleet(tmp_path: Path, spec: FleetSpec) -> Analysis:
    out = tmp_path / "dumps"
    write_fleet(simulate(spec), out)
    return analyze(out)


@pytest.mark.parametrize(
    ("side", "ranks", "delay_ms", "skew_ms"),
    [
        ("cpu", (35,), 5.0, 0.0),
        ("cpu", (9, 44), 20.0, 500.0),
        ("gpu", (35,), 5.0, 0.0),
        ("gpu", (21, 50), 5.0, 500.0),
    ],
)
def test_simulated_stragglers_of_64_ranks_match_ground_truth(
    tmp_path: Path, side: str, ranks: tuple[int, ...], delay_ms: float, skew_ms: float
) -> None:
    spec = FleetSpec(
        world=64,
        entries=TEN_STEPS,
        stragglers=tuple(Straggler(rank=r, delay_ms=delay_ms, side=side) for r in ranks),
        clock_skew_ms=skew_ms,
    )
    analysis = _fleet(tmp_path, spec)
    named = _stragglers(analysis)
    assert sorted(named) == sorted(ranks), [f.summary for f in analysis.findings]
    assert _hang_findings(analysis) == [] and analysis.root_cause is None
    if len(ranks) == 1:
        assert named[ranks[0]]["side"] == side and named[ranks[0]]["basis"] == "gpu_start"


@pytest.mark.parametrize("skew_ms", [0.0, 500.0])
def test_a_healthy_simulated_fleet_names_no_straggler(tmp_path: Path, skew_ms: float) -> None:
    analysis = _fleet(tmp_path, FleetSpec(world=64, entries=500, clock_skew_ms=skew_ms, seed=5))
    assert analysis.findings == []


def test_a_straggler_in_a_hung_job_leaves_the_hang_verdict_alone(tmp_path: Path) -> None:
    spec = FleetSpec(world=64, entries=TEN_STEPS, fault="skipped_collective", fault_rank=21)
    plain = _fleet(tmp_path / "plain", spec)
    slow = _fleet(
        tmp_path / "slow",
        FleetSpec(
            world=64,
            entries=TEN_STEPS,
            fault="skipped_collective",
            fault_rank=21,
            stragglers=(Straggler(rank=44, delay_ms=20.0, side="gpu"),),
        ),
    )
    assert plain.root_cause is not None and slow.root_cause is not None
    root, slow_root = plain.findings[plain.root_cause], slow.findings[slow.root_cause]
    assert (slow_root.kind, slow_root.culprit_ranks) == (root.kind, root.culprit_ranks)
    assert _hang_findings(slow) == _hang_findings(plain)
    assert list(_stragglers(slow)) == [44]
    # listed after the hang's findings, outside its tree
    straggler = slow.findings[-1]
    assert straggler.kind == "straggler" and straggler.consequence_of is None
    assert straggler.consequences == []


@pytest.mark.parametrize(("side", "rank", "skew_ms"), [("gpu", 300, 500.0), ("cpu", 700, 0.0)])
def test_simulated_stragglers_of_1024_ranks_match_ground_truth(
    tmp_path: Path, side: str, rank: int, skew_ms: float
) -> None:
    spec = FleetSpec(
        world=1024,
        entries=TEN_STEPS,
        stragglers=(Straggler(rank=rank, delay_ms=10.0, side=side),),
        clock_skew_ms=skew_ms,
    )
    analysis = _fleet(tmp_path, spec)
    assert list(_stragglers(analysis)) == [rank], [f.summary for f in analysis.findings]
    assert analysis.findings[0].evidence["side"] == side


def test_the_collectors_archive_of_a_continuous_job_is_read_as_a_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive, scenario = straggler_fixture("one")
    spans = tmp_path / "spans.jsonl"
    assert main(["export", str(archive), "--otlp-json", str(spans)]) == 0
    # a continuous-mode job sends its spans before any incident: they name none
    text = spans.read_text().replace(scenario["incident"], "")
    spans.write_text(text)
    reread = tmp_path / "reread"
    assert main(["import", str(spans), "--archive", str(reread), "--incident", "stream"]) == 0
    capsys.readouterr()
    from fr_otel.archive.manifest import read_manifest

    manifest = read_manifest(reread, "stragglers", "stream")
    assert manifest is not None and manifest.snapshot
    analysis = analyze(reread)
    assert analysis.snapshot is not None
    assert _hang_findings(analysis) == [] and list(_stragglers(analysis)) == [2]


def test_the_report_says_slow_not_stuck_and_draws_a_lateness_strip(tmp_path: Path) -> None:
    archive, _ = straggler_fixture("two")
    page_path = tmp_path / "report.html"
    assert main(["analyze", str(archive), "--format", "html", "-o", str(page_path)]) == 1
    page = page_path.read_text()
    assert "Slow, not stuck" in page and "Root cause" not in page
    strip = page[page.index('<section id="lateness">') :]
    strip = strip[: strip.index("</section>")]
    # one row per rank, the stragglers first and in red, each a row of bars
    rows = strip.split("<tr>")[1:]
    assert [row[row.index("rank ") : row.index("</th>")] for row in rows[:2]] == [
        "rank 3",
        "rank 1",
    ]
    assert all('fill="#c62828"' in row for row in rows[:2])
    assert all('fill="#c62828"' not in row for row in rows[2:]) and len(rows) == 4
    assert all(row.count("<rect") >= 30 for row in rows)
