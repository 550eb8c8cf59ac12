"""``fr-otel import`` end to end on hand-written dumps: archive layout, idempotence, bad files."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from fr_otel.archive import import_dumps
from fr_otel.cli.import_cmd import import_
from tests.fr_dumps import fr_dump, fr_entry, two_rank_dumps, write_json, write_pickle


def _rows(archive: Path, where: str = "true") -> list[tuple[object, ...]]:
    query = (
        "SELECT job, incident, rank, count(*) FROM read_parquet(?, hive_partitioning = true,"
        f" hive_types_autocast = false) WHERE {where} GROUP BY ALL ORDER BY ALL"
    )
    return duckdb.execute(query, [str(archive / "**" / "*.parquet")]).fetchall()


class _Hostile:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_healthy_import_is_queryable_and_idempotent(healthy_dir: Path, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    first = import_dumps([healthy_dir], archive=archive, job="llama", incident="inc1")
    assert first.ok and first.ranks == [0, 1] and first.entries == 6 and first.groups == 1
    assert first.missing_ranks == []
    assert sorted(p.relative_to(archive).as_posix() for p in archive.rglob("*.parquet")) == [
        "job=llama/incident=inc1/rank-000000.parquet",
        "job=llama/incident=inc1/rank-000001.parquet",
    ]
    assert _rows(archive) == [("llama", "inc1", 0, 3), ("llama", "inc1", 1, 3)]
    again = import_dumps([healthy_dir], archive=archive, job="llama", incident="inc1")
    assert again.ok
    assert _rows(archive) == [("llama", "inc1", 0, 3), ("llama", "inc1", 1, 3)]
    assert not [p for p in archive.rglob("*") if p.name.endswith(".tmp")]


def test_default_incident_is_stable_across_copies(healthy_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in healthy_dir.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    a = import_dumps([healthy_dir], archive=tmp_path / "a")
    b = import_dumps([copy], archive=tmp_path / "b")
    assert a.incidents == b.incidents and a.incidents[0].startswith("import-")


def test_pickle_and_json_of_the_same_buffer_import_once(tmp_path: Path) -> None:
    dumps = two_rank_dumps()
    for rank, dump in dumps.items():
        write_pickle(tmp_path / "d" / f"rank_{rank}", dump)
        write_json(tmp_path / "d" / f"rank_{rank}.json", dump)
    report = import_dumps([tmp_path / "d"], archive=tmp_path / "arc", incident="x")
    assert report.ok and report.entries == 6
    assert sorted(p.name for p in report.twins_skipped) == ["rank_0.json", "rank_1.json"]
    formats = duckdb.execute(
        "SELECT DISTINCT source_format FROM read_parquet(?)", [str(tmp_path / "arc/**/*.parquet")]
    ).fetchall()
    assert formats == [("pickle",)]


def test_duplicate_rank_keeps_newest_and_names_the_other(tmp_path: Path) -> None:
    old = fr_dump([fr_entry(record_id=i, seq=i + 1) for i in range(2)])
    new = fr_dump([fr_entry(record_id=i, seq=i + 1) for i in range(5)])
    write_pickle(tmp_path / "d" / "a" / "rank_0", old)
    write_pickle(tmp_path / "d" / "b" / "rank_0", new)
    write_pickle(tmp_path / "d" / "rank_1", new)
    report = import_dumps([tmp_path / "d"], archive=tmp_path / "arc", incident="x")
    assert [(p.problem, Path(p.path).parent.name) for p in report.problems] == [("duplicate", "a")]
    assert "rank 0" in report.problems[0].detail
    assert _rows(tmp_path / "arc") == [("default", "x", 0, 5), ("default", "x", 1, 5)]


def test_missing_rank_is_reported_from_group_membership(tmp_path: Path) -> None:
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}}
    for rank in (0, 2):
        write_pickle(
            tmp_path / "d" / f"nccl_trace_rank_{rank}",
            fr_dump([fr_entry(record_id=0, seq=1)], pg_config=config),
        )
    report = import_dumps([tmp_path / "d"], archive=tmp_path / "arc")
    assert report.ok
    assert report.missing_ranks == [1, 3]
    assert "missing ranks: 1,3" in report.summary()


def test_many_missing_ranks_are_summed_up_as_runs(tmp_path: Path) -> None:
    # two dumps of a 4,096-rank job: the summary is one short line, not 4,094 numbers
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(4096)))}}
    for rank in (0, 100):
        write_pickle(
            tmp_path / "d" / f"nccl_trace_rank_{rank}",
            fr_dump([fr_entry(record_id=0, seq=1)], pg_config=config),
        )
    report = import_dumps([tmp_path / "d"], archive=tmp_path / "arc")
    assert len(report.missing_ranks) == 4094
    assert "missing ranks: 1-99,101-4095;" in report.summary() + ";"


def test_gloo_membership_is_inferred_and_marked(tmp_path: Path) -> None:
    broken = {"": {"name": "", "desc": "", "ranks": "[]"}}
    for rank in (0, 1, 2):
        entries = [fr_entry(record_id=0, seq=1, op="gloo:all_reduce")]
        if rank != 2:
            entries.append(
                fr_entry(record_id=1, seq=1, op="gloo:all_reduce", pg=("1", "undefined"))
            )
        write_pickle(tmp_path / "d" / f"rank_{rank}", fr_dump(entries, pg_config=broken))
    report = import_dumps([tmp_path / "d"], archive=tmp_path / "arc")
    assert report.ok
    got = duckdb.execute(
        "SELECT DISTINCT pg_name, pg_ranks, pg_ranks_inferred FROM read_parquet(?) ORDER BY 1",
        [str(tmp_path / "arc/**/*.parquet")],
    ).fetchall()
    assert got == [("0", [0, 1, 2], True), ("1", [0, 1], True)]


def test_bad_files_are_named_and_the_rest_imported(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    good = two_rank_dumps()[0]
    folder = tmp_path / "d"
    write_pickle(folder / "rank_0", good)
    (folder / "rank_1").write_bytes(pickle.dumps(good, protocol=2)[:-100])
    (folder / "rank_2").write_bytes(
        pickle.dumps({"version": "2.10", "pg_config": {}, "entries": [_Hostile(marker)]})
    )
    (folder / "rank_3").write_bytes(b"")
    (folder / "rank_4").write_bytes(b"GIF89a")
    report = import_dumps([folder, tmp_path / "absent"], archive=tmp_path / "arc", incident="x")
    assert not marker.exists()
    assert [(Path(p.path).name, p.problem) for p in report.problems] == [
        ("absent", "missing"),
        ("rank_1", "truncated"),
        ("rank_2", "hostile"),
        ("rank_3", "empty"),
        ("rank_4", "foreign"),
    ]
    assert _rows(tmp_path / "arc") == [("default", "x", 0, 3)]


def test_strict_writes_nothing_when_a_file_is_bad(tmp_path: Path) -> None:
    folder = tmp_path / "d"
    write_pickle(folder / "rank_0", two_rank_dumps()[0])
    (folder / "rank_1").write_bytes(b"\x80\x02")
    report = import_dumps([folder], archive=tmp_path / "arc", strict=True)
    assert report.strict_aborted and not report.files_written
    assert not list((tmp_path / "arc").rglob("*")) or not list(
        (tmp_path / "arc").rglob("*.parquet")
    )
    assert not [p for p in (tmp_path / "arc").rglob("*") if p.is_file()]


def test_torchft_quorums_become_separate_incidents(tmp_path: Path) -> None:
    for quorum in (3, 4):
        for rank, dump in two_rank_dumps().items():
            write_pickle(tmp_path / "ft" / f"comm_lib_trace_quorum_{quorum}" / str(rank), dump)
    report = import_dumps([tmp_path / "ft"], archive=tmp_path / "arc", incident="crash")
    assert report.ok and report.incidents == ["crash-quorum3", "crash-quorum4"]
    assert len(_rows(tmp_path / "arc")) == 4


def test_parallel_import_matches_inline(tmp_path: Path) -> None:
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(8)))}}
    for rank in range(8):
        entries = [fr_entry(record_id=i, seq=i + 1) for i in range(50 + rank)]
        write_pickle(
            tmp_path / "d" / f"comm_lib_trace_rank_{rank}", fr_dump(entries, pg_config=config)
        )
    parallel = import_dumps([tmp_path / "d"], archive=tmp_path / "p", workers=2)
    inline = import_dumps([tmp_path / "d"], archive=tmp_path / "i", workers=1)
    assert parallel.ok and parallel.entries == inline.entries == sum(50 + r for r in range(8))
    assert _rows(tmp_path / "p") == _rows(tmp_path / "i")


def test_cli_exit_codes_and_messages(healthy_dir: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(
        import_, [str(healthy_dir), "--archive", str(tmp_path / "a")], standalone_mode=False
    )
    assert ok.exception is None and ok.return_value == 0
    assert "imported 2 ranks, 6 entries, 1 groups" in ok.output
    (healthy_dir / "nccl_trace_rank_2").write_bytes(b"junk")
    bad = runner.invoke(
        import_, [str(healthy_dir), "--archive", str(tmp_path / "b")], standalone_mode=False
    )
    assert bad.return_value == 2
    assert f"{healthy_dir / 'nccl_trace_rank_2'}: foreign:" in bad.output


def test_unusable_archive_and_names_raise_typed_errors(healthy_dir: Path, tmp_path: Path) -> None:
    from fr_otel.errors import ArchiveError, ConfigError

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(ArchiveError, match="cannot write to the archive"):
        import_dumps([healthy_dir], archive=blocker)
    with pytest.raises(ConfigError, match=r"job '\.\./etc'"):
        import_dumps([healthy_dir], archive=tmp_path / "a", job="../etc")


def test_main_turns_typed_errors_into_one_line_and_exit_2(
    healthy_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fr_otel.cli import main

    code = main(["import", str(healthy_dir), "--archive", str(tmp_path / "a"), "--job", "a/b"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("fr-otel: error: job 'a/b' is not usable")
    assert len(err.strip().splitlines()) == 1
    assert main(["import", str(healthy_dir), "--archive", str(tmp_path / "a")]) == 0


def test_missing_last_gloo_rank_is_seen_through_all_gather_shapes(tmp_path: Path) -> None:
    broken = {"": {"name": "", "desc": "", "ranks": "[]"}}
    gather = fr_entry(record_id=1, seq=2, op="gloo:all_gather", sizes=[[8]])
    gather["output_sizes"] = [[4, 8]]  # gloo stacks the list variant: [world, n]
    for rank in (0, 1, 2):  # rank 3 of 4 wrote no dump
        entries = [fr_entry(record_id=0, seq=1, op="gloo:all_reduce"), gather]
        write_pickle(tmp_path / "d" / f"rank_{rank}", fr_dump(entries, pg_config=broken))
    report = import_dumps([tmp_path / "d"], archive=tmp_path / "arc")
    assert report.ok and report.missing_ranks == [3]


def test_dump_with_no_entries_is_named_and_its_rank_counts_as_missing(tmp_path: Path) -> None:
    write_json(tmp_path / "d" / "rank_0.json", fr_dump([]))
    write_pickle(tmp_path / "d" / "rank_1", two_rank_dumps()[1])
    report = import_dumps([tmp_path / "d"], archive=tmp_path / "arc", incident="x")
    assert report.ok and report.ranks == [1] and report.entries == 3
    assert 0 in report.missing_ranks
    [(path, warning)] = report.warnings
    assert path.endswith("rank_0.json") and "no entries" in warning
    assert _rows(tmp_path / "arc") == [("default", "x", 1, 3)]


def test_an_unknown_format_version_is_read_with_a_warning(tmp_path: Path) -> None:
    dumps = two_rank_dumps()
    dumps[0]["version"] = "99.1"
    write_pickle(tmp_path / "d" / "rank_0", dumps[0])
    write_pickle(tmp_path / "d" / "rank_1", dumps[1])
    report = import_dumps([tmp_path / "d"], archive=tmp_path / "arc", incident="x")
    assert report.ok and report.ranks == [0, 1]
    [(path, warning)] = report.warnings
    assert path.endswith("rank_0") and "version 99.1" in warning
