"""An analysis of dumps imports them into scratch files (Arrow IPC, with each stack, name
and constant once per file as a dictionary) instead of Parquet: every row must read as
``fr-otel import``'s Parquet archive gives it, through every step of the import that
rewrites a file (gloo memberships inferred, runs split apart); past
``scratch.MAX_FILES`` dumps, the analysis reads Parquet as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from fr_otel.analysis import analyze
from fr_otel.analysis.source import open_source
from fr_otel.archive import ImportReport, import_dumps, scratch
from fr_otel.archive.manifest import read_manifest
from fr_otel.dumps.discover import discover
from fr_otel.dumps.load import load_dump_file
from fr_otel.dumps.parse import SHARED_COLUMNS
from fr_otel.sim import FleetSpec, simulate, write_fleet
from tests.fixtures import two_real_gloo_runs

DATA = Path(__file__).resolve().parents[1] / "data"
CASES = sorted(p.name for p in DATA.iterdir() if p.name.startswith(("gloo_", "workload_")))


def _plain(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A dictionary column's values, row by row (``cast`` cannot decode nested ones)."""
    if not pa.types.is_dictionary(column.type):
        return column
    return pa.chunked_array(
        [chunk.dictionary.take(chunk.indices) for chunk in column.chunks], column.type.value_type
    )


@pytest.mark.parametrize("case", CASES)
def test_shared_rows_hold_the_same_values_as_plain_rows(case: str) -> None:
    """Every real dump of the fixtures (pickle and JSON, gloo, every workload family):
    the shared form differs from the plain one in its types only."""
    found = discover([DATA / case]).files
    assert found
    for dump in found:
        plain = load_dump_file(dump, job="j", incident="i").table
        shared = load_dump_file(dump, job="j", incident="i", shared=True).table
        assert shared.column_names == plain.column_names
        dictionaries = {f.name for f in shared.schema if pa.types.is_dictionary(f.type) and f.name}
        assert dictionaries == SHARED_COLUMNS, dump.path
        for name in plain.column_names:
            assert _plain(shared.column(name)).equals(plain.column(name)), (dump.path, name)


def _rows(connection: Any, relation: str) -> list[tuple[Any, ...]]:
    return connection.execute(f"SELECT * FROM {relation} ORDER BY rank, record_id").fetchall()


def test_scratch_files_read_as_the_parquet_archive_through_every_rewrite(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "dumps"
    folder.mkdir()
    two_real_gloo_runs(folder)
    parquet = import_dumps([folder], archive=tmp_path / "parquet", workers=1)
    arrow = import_dumps(
        [folder], archive=tmp_path / "arrow", workers=2, members_in_files=True, scratch_files=True
    )
    assert arrow.ok and parquet.ok
    assert arrow.runs_split and arrow.incidents == parquet.incidents
    assert len(arrow.incidents) == 2
    assert {f.path.suffix for f in arrow.rank_files} == {scratch.SUFFIX}
    connection = duckdb.connect()
    for incident in arrow.incidents:
        files = [f.path for f in arrow.rank_files if f.incident == incident]
        assert len(files) == 3
        connection.register("scratch_rows", scratch.rows(files))
        folder_of = tmp_path / "parquet" / "job=default" / f"incident={incident}"
        expected = _rows(connection, f"read_parquet('{folder_of}/*.parquet')")
        assert expected and _rows(connection, "scratch_rows") == expected
        # gloo's groups got their members from the whole fleet, in the scratch files too
        inferred = connection.execute(
            "SELECT count(*) FROM scratch_rows WHERE pg_ranks_inferred"
        ).fetchall()
        assert inferred[0][0] > 0
        # the manifest counts scratch files as the rank files they are
        manifest = read_manifest(tmp_path / "arrow", "default", incident)
        assert manifest == read_manifest(tmp_path / "parquet", "default", incident)


@pytest.mark.parametrize("many", [False, True], ids=["scratch", "past-max-files"])
def test_analysing_dumps_reads_every_column_as_the_archive_gives_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, many: bool
) -> None:
    """Up to MAX_FILES dumps, ``src`` scans the scratch files; past it (as at 8,192 ranks,
    where DuckDB's own Parquet scan is faster), the import writes Parquet. Both read as
    the archive that fr-otel import writes, and the analysis finds the same."""
    if many:
        monkeypatch.setattr(scratch, "MAX_FILES", 2)
    folder = DATA / "gloo_skipped_in_subgroup"
    import_dumps([folder], archive=tmp_path / "archive", workers=1)
    with open_source(tmp_path / "archive") as imported:
        expected = _rows(imported.connection, "src")
    with open_source(folder) as source:
        suffixes = {Path(p).suffix for (p,) in _paths(source.connection)}
        assert suffixes == {".parquet" if many else scratch.SUFFIX}
        assert expected and _rows(source.connection, "src") == expected
    found = analyze(folder).to_dict()
    assert found["findings"]
    assert found == analyze(tmp_path / "archive").to_dict()


def _paths(connection: Any) -> list[tuple[str]]:
    return connection.execute("SELECT path FROM src_rank_files ORDER BY path").fetchall()


def _imported_for_analysis(dumps: Path, archive: Path) -> ImportReport:
    """``dumps`` imported as ``open_source`` imports them, with workers; every table the
    import hands over checked against its committed file."""
    report = import_dumps(
        [dumps], archive=archive, workers=2, members_in_files=False, scratch_files=True
    )
    for path, table in report.scratch_tables.items():
        assert table.equals(scratch.read(path)), path
    return report


def test_the_import_hands_over_each_scratch_file_mapped_as_committed(tmp_path: Path) -> None:
    """The parent maps each scratch file as its outcome arrives (``workers._received``),
    while the workers convert the rest, for the analysis to scan. What it hands over is
    the committed file's rows; a file staged again later (gloo's memberships inferred,
    runs split apart) is left for the analysis to map."""
    write_fleet(simulate(FleetSpec(world=16, entries=50)), tmp_path / "sim")
    report = _imported_for_analysis(tmp_path / "sim", tmp_path / "a")
    assert report.ok and len(report.files_written) == 16
    assert set(report.scratch_tables) == set(report.files_written)

    (tmp_path / "gloo").mkdir()
    two_real_gloo_runs(tmp_path / "gloo")  # every file staged again, for both reasons
    report = _imported_for_analysis(tmp_path / "gloo", tmp_path / "b")
    assert report.runs_split and len(report.files_written) == 6
    assert len(report.scratch_tables) < len(report.files_written)


def test_the_analysis_scans_the_files_the_import_mapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_fleet(simulate(FleetSpec(world=16, entries=50)), tmp_path / "sim")
    opened: list[Path] = []
    real = scratch.mapped

    def counted(path: Path) -> pa.Table:
        opened.append(path)
        return real(path)

    monkeypatch.setattr(scratch, "mapped", counted)
    with open_source(tmp_path / "sim") as source:
        assert len(_paths(source.connection)) == 16
        (rows,) = source.connection.execute("SELECT count(*) FROM src").fetchone()
        assert rows == 16 * 50
    assert len(opened) == 16  # each once, by the import
