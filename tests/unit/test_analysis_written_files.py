"""Analysing dumps imports them and then reads what the import wrote: the import's own
account of each file (``ImportReport.rank_files``) stands for its footer, which is then
not read again, except when every page is being verified."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from fr_otel.analysis import analyze
from fr_otel.analysis.source import open_source
from fr_otel.archive import checks, import_dumps, scratch
from fr_otel.archive.checks import check_files, verifying_pages
from fr_otel.sim import FleetSpec, simulate, write_fleet
from tests.fr_dumps import fr_dump, fr_entry, write_pickle


def _replica_dumps(folder: Path) -> Path:
    """Two replicas whose groups share a name ("1": ranks 0-1, and ranks 2-3), as
    torchft's do: each rank's rows hold its own group's members."""
    world = {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}
    for rank in range(4):
        pair = "[0, 1]" if rank < 2 else "[2, 3]"
        config = {"0": world, "1": {"name": "1", "desc": "replica", "ranks": pair}}
        steps = 5 if rank == 3 else 6  # rank 3 skips its replica's last all-reduce
        entries = [fr_entry(record_id=i, seq=i + 1, pg=("1", "replica")) for i in range(steps)] + [
            fr_entry(record_id=steps, seq=1)
        ]
        write_pickle(folder / f"nccl_trace_rank_{rank}", fr_dump(entries, pg_config=config))
    return folder


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("written") / "dumps"
    fleet = simulate(FleetSpec(world=8, entries=60, tp=2, fault="skipped_collective", seed=3))
    write_fleet(fleet, folder)
    return folder


def _counting_footer_reads(monkeypatch: Any) -> list[Path]:
    read: list[Path] = []
    check = checks.check_rank_file

    def counted(path: Path, **kwargs: Any) -> Any:
        read.append(path)
        return check(path, **kwargs)

    monkeypatch.setattr(checks, "check_rank_file", counted)
    return read


def test_the_import_describes_each_file_as_its_footer_does(dumps: Path, tmp_path: Path) -> None:
    report = import_dumps([dumps], archive=tmp_path / "archive", workers=2)
    assert report.ok and len(report.files_written) == 8
    assert [f.path for f in report.rank_files] == report.files_written
    from_footers = {f.path: f for f in check_files(report.files_written).good}
    for described in report.rank_files:
        footer = from_footers[described.path]
        # the footer's statistics span every entry's creation time, as the import's does
        assert dataclasses.asdict(described) == dataclasses.asdict(footer), described.path


def test_analysing_dumps_reads_no_footer_and_finds_what_the_archive_gives(
    dumps: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    import_dumps([dumps], archive=tmp_path / "archive", workers=2)
    from_archive = analyze(tmp_path / "archive").to_dict()
    read = _counting_footer_reads(monkeypatch)
    with open_source(dumps) as source:
        files = source.connection.execute("SELECT count(*) FROM src_rank_files").fetchone()
        assert files == (8,)
        assert read == []
    from_dumps = analyze(dumps).to_dict()
    assert read == []
    assert from_dumps["findings"], "the fleet's skipped collective is found"
    assert from_dumps["findings"] == from_archive["findings"]


def test_verifying_pages_reads_every_footer_of_an_archive_again(
    dumps: Path, tmp_path: Path, monkeypatch: Any
) -> None:
    import_dumps([dumps], archive=tmp_path / "archive", workers=2)
    read = _counting_footer_reads(monkeypatch)
    with verifying_pages(), open_source(tmp_path / "archive"):
        pass
    assert len(read) == 8
    # an analysis's own scratch files are Arrow, written a moment ago: no footer to read
    read.clear()
    with verifying_pages(), open_source(dumps) as source:
        assert source.connection.execute("SELECT count(*) FROM src").fetchone() == (480,)
    assert read == []


def _src(connection: Any) -> list[tuple[Any, ...]]:
    return connection.execute(
        "SELECT rank, record_id, pg_name, pg_ranks, pg_ranks_inferred, peer FROM src"
        " ORDER BY rank, record_id"
    ).fetchall()


def _every_column(connection: Any) -> list[tuple[Any, ...]]:
    return connection.execute("SELECT * FROM src ORDER BY rank, record_id").fetchall()


CASES = sorted(
    p.name
    for p in (Path(__file__).resolve().parents[1] / "data").iterdir()
    if p.name.startswith(("gloo_", "workload_"))
)


@pytest.mark.parametrize("case", ["simulated", "replicas", *CASES])
def test_dumps_analysed_without_member_lists_in_files_read_as_the_archive(
    case: str, dumps: Path, tmp_path: Path
) -> None:
    """The temporary archive of an analysis of dumps leaves each row's group members out
    of its files (at 8,192 ranks most of a file's write) and ``src`` puts them back:
    every row reads as it does from an archive that ``fr-otel import`` wrote, for real
    gloo jobs (members inferred, torchft quorums, subgroups) and simulated NCCL ones."""
    folder = (
        dumps
        if case == "simulated"
        else _replica_dumps(tmp_path / "replicas")
        if case == "replicas"
        else Path(__file__).resolve().parents[1] / "data" / case
    )
    import_dumps([folder], archive=tmp_path / "archive", workers=1)
    with open_source(tmp_path / "archive") as imported:
        if case == "replicas":  # members by rank, not by name: two lists for group "1"
            lists = {tuple(r[3]) for r in _src(imported.connection) if r[2] == "1"}
            assert lists == {(0, 1), (2, 3)}
        expected = _src(imported.connection)
        every_column = _every_column(imported.connection)
        groups = imported.connection.execute(
            "SELECT count(DISTINCT pg_ranks) FROM src WHERE pg_ranks IS NOT NULL"
        ).fetchone()
    assert groups is not None and groups[0] >= 1
    with open_source(folder) as source:
        (path,) = source.connection.execute("SELECT min(path) FROM src_rank_files").fetchone()
        assert path.endswith(scratch.SUFFIX)
        assert "pg_ranks" not in scratch.read(Path(path)).column_names
        assert _src(source.connection) == expected
        # the scratch files' dictionaries (stacks, names, constants) read as plain values
        assert _every_column(source.connection) == every_column
    assert analyze(folder).to_dict() == analyze(tmp_path / "archive").to_dict()
