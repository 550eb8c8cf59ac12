"""Entries a finding shows are read from the files of the ranks it names, not from every
rank's file (``source.rows_of_ranks``): the same rows as ``src`` holds for those ranks."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from fr_otel.analysis.source import open_source, register_archive, rows_of_ranks
from fr_otel.archive.incidents import pick_incident

ARCHIVE = Path(__file__).resolve().parents[1] / "data" / "stragglers_one" / "archive"


def _rows(connection: duckdb.DuckDBPyConnection, relation: str, ranks: str) -> list[tuple]:
    return connection.execute(
        f"SELECT rank, record_id, frames, input_sizes, call_site FROM {relation}"
        f" WHERE rank IN ({ranks}) ORDER BY rank, record_id"
    ).fetchall()


def test_the_ranks_own_files_hold_what_src_holds_for_them() -> None:
    with open_source(ARCHIVE) as source:
        connection, incident = source.connection, source.incident
        relation = rows_of_ranks(connection, incident.job, incident.incident, {1, 2})
        assert relation != "src" and "rank-000003" not in relation and "rank-000002" in relation
        assert _rows(connection, relation, "1, 2") == _rows(connection, "src", "1, 2")
        assert _rows(connection, relation, "1, 2"), "the fixture's ranks 1 and 2 have rows"
        assert _rows(connection, relation, "0, 3") == [], "other ranks' files are not read"


# a list column's leaves are named "element" in every list: a file is told apart by its
# columns' paths, not by its leaves' names
@pytest.mark.parametrize("column", ["call_site", "output_dtypes"])
def test_an_older_file_without_a_column_reads_it_as_null(tmp_path: Path, column: str) -> None:
    archive = tmp_path / "archive"
    shutil.copytree(ARCHIVE, archive)
    incident = pick_incident(archive, None, None)
    folder = next(archive.glob("job=*/incident=*"))
    old = folder / "rank-000001.parquet"
    pq.write_table(pq.read_table(old).drop_columns([column]), old)
    connection = duckdb.connect()
    register_archive(connection, archive, only=incident)
    relation = rows_of_ranks(connection, incident.job, incident.incident, {1})
    values = connection.execute(f"SELECT DISTINCT {column} FROM {relation} WHERE rank = 1")
    assert values.fetchall() == [(None,)]
    others = connection.execute(f"SELECT count({column}) FROM src WHERE rank <> 1").fetchone()
    assert others is not None and others[0] > 0


def test_without_the_file_list_the_whole_view_is_read() -> None:
    connection = duckdb.connect()
    assert rows_of_ranks(connection, "j", "i", {1}) == "src"
    connection.execute(
        "CREATE TABLE src_rank_files (job VARCHAR, incident VARCHAR, rank BIGINT, path VARCHAR)"
    )
    assert rows_of_ranks(connection, "j", "i", {1}) == "src"
