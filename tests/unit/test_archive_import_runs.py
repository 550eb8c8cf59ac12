"""Runs are never mixed: dumps of two runs of a job in one input become two incidents
(told apart by what the dumps carry), and every duplicate of a rank is named."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest

from fr_otel.archive import import_dumps
from fr_otel.archive.manifest import read_manifest
from fr_otel.cli import main
from tests.fixtures import two_real_gloo_runs
from tests.fr_dumps import fr_dump, fr_entry, write_pickle

DATA = Path(__file__).resolve().parents[1] / "data"
HOUR_NS = 3600 * 10**9


def _sources(archive: Path, incident: str) -> set[str]:
    rows = duckdb.execute(
        "SELECT DISTINCT source_file FROM read_parquet(?)",
        [str(archive / "job=default" / f"incident={incident}" / "*.parquet")],
    ).fetchall()
    return {Path(name).parent.name for (name,) in rows}


def test_two_real_gloo_runs_in_one_folder_become_two_incidents(tmp_path: Path) -> None:
    folder = tmp_path / "dumps"
    folder.mkdir()
    two_real_gloo_runs(folder)
    archive = tmp_path / "archive"
    report = import_dumps([folder], archive=archive, workers=1)
    assert report.ok, report.problems
    assert report.runs_split and len(report.incidents) == 2
    missing = {}
    for incident in report.incidents:
        manifest = read_manifest(archive, "default", incident)
        assert manifest is not None
        missing[incident] = manifest.missing_ranks
        assert len(manifest.ranks) == 3
    first, second = report.incidents
    # each incident holds one run's files only, and misses that run's rank
    by_source = {incident: _sources(archive, incident) for incident in report.incidents}
    assert sorted(by_source.values(), key=sorted) == [{"comm_traces"}, {"dumps"}]
    run_of_rank_1 = next(i for i, s in by_source.items() if s == {"dumps"})
    assert missing[run_of_rank_1] == (1,)
    assert missing[({first, second} - {run_of_rank_1}).pop()] == (2,)
    # nothing was reported as a duplicate: ranks 0 and 3 are in both runs, once each
    assert not report.problems
    assert "2 runs" in report.summary()


def test_the_cli_says_so_and_analyze_never_mixes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "dumps"
    folder.mkdir()
    two_real_gloo_runs(folder)
    code = main(["import", str(folder), "--archive", str(tmp_path / "a"), "--incident", "crash"])
    out = capsys.readouterr().out
    assert code == 0
    assert "the dumps are of 2 runs" in out
    assert "crash-run1: ranks" in out and "crash-run2: ranks" in out
    assert "no dump from 1" in out and "no dump from 2" in out
    code = main(["analyze", str(folder)])
    err = capsys.readouterr().err
    assert code == 2
    assert "holds dumps of 2 runs" in err and "never analysed together" in err


def test_runs_apart_in_time_are_split_oldest_first_and_one_run_is_not(tmp_path: Path) -> None:
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}}

    def dump(shift_ns: int, entries: int = 4) -> dict[str, object]:
        made = [fr_entry(record_id=i, seq=i + 1) for i in range(entries)]
        for entry in made:
            entry["time_created_ns"] += shift_ns
        return fr_dump(made, pg_config=config)

    # run A (an hour ago) lost rank 2; run B (now) lost rank 0; run A's rank 1 ran 0.5 s
    # ahead of its peers, which is still one run
    write_pickle(tmp_path / "d" / "a" / "rank_0", dump(0))
    write_pickle(tmp_path / "d" / "a" / "rank_1", dump(500_000_000))
    write_pickle(tmp_path / "d" / "b" / "rank_1", dump(HOUR_NS))
    write_pickle(tmp_path / "d" / "b" / "rank_2", dump(HOUR_NS))
    report = import_dumps([tmp_path / "d"], archive=tmp_path / "arc", incident="x")
    assert report.ok and report.incidents == ["x-run1", "x-run2"]
    assert [(i.incident, i.ranks, i.missing_ranks) for i in report.imported] == [
        ("x-run1", (0, 1), (2,)),
        ("x-run2", (1, 2), (0,)),
    ]
    # the same dumps without the second run: one incident, named as asked
    shutil.rmtree(tmp_path / "d" / "b")
    report = import_dumps([tmp_path / "d"], archive=tmp_path / "arc2", incident="x")
    assert report.ok and report.incidents == ["x"] and not report.runs_split


def test_another_world_size_or_fr_version_is_another_run(tmp_path: Path) -> None:
    def dump(world: int, version: str = "2.10") -> dict[str, object]:
        config = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}}
        entries = [fr_entry(record_id=i, seq=i + 1, version=version) for i in range(3)]
        return fr_dump(entries, pg_config=config, version=version)

    write_pickle(tmp_path / "d" / "rank_0", dump(2))
    write_pickle(tmp_path / "d" / "rank_1", dump(2))
    write_pickle(tmp_path / "d" / "big" / "rank_0", dump(4))
    write_pickle(tmp_path / "d" / "old" / "rank_1", dump(2, version="2.7"))
    report = import_dumps([tmp_path / "d"], archive=tmp_path / "arc", incident="x")
    assert report.ok and len(report.incidents) == 3
    assert sorted(i.ranks for i in report.imported) == [(0,), (0, 1), (1,)]


def test_every_duplicate_of_a_rank_is_named(tmp_path: Path) -> None:
    for name, entries in (("a", 2), ("b", 3), ("c", 5)):
        write_pickle(
            tmp_path / "d" / name / "rank_0",
            fr_dump([fr_entry(record_id=i, seq=i + 1) for i in range(entries)]),
        )
    write_pickle(
        tmp_path / "d" / "rank_1", fr_dump([fr_entry(record_id=i, seq=i + 1) for i in range(5)])
    )
    report = import_dumps([tmp_path / "d"], archive=tmp_path / "arc", incident="x")
    named = sorted((Path(p.path).parent.name, p.problem) for p in report.problems)
    assert named == [("a", "duplicate"), ("b", "duplicate")]
    assert all("rank 0" in p.detail and "/c/rank_0" in p.detail for p in report.problems)
    assert report.incidents == ["x"]


def test_dumps_under_two_run_folders_are_two_runs_even_at_the_same_time(tmp_path: Path) -> None:
    # the recorder archives torch's own dumps under _fr_dumps/job=J/run=R/incident=I/
    for run in ("aaaa1111", "bbbb2222"):
        for rank in (0, 1):
            entries = [fr_entry(record_id=i, seq=i + 1) for i in range(3)]
            write_pickle(
                tmp_path / "d" / f"run={run}" / "incident=x" / f"comm_lib_trace_rank_{rank}",
                fr_dump(entries),
            )
    report = import_dumps([tmp_path / "d"], archive=tmp_path / "arc", incident="x")
    assert report.ok and report.incidents == ["x-run1", "x-run2"]
    assert not report.problems  # no rank was taken for a duplicate of the other run's
