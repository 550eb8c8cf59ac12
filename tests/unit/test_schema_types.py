"""The schema's column types, named without pyarrow: the Arrow schema and the SQL types
are made from the same names, and reading an archive imports no pyarrow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from fr_otel import schema
from fr_otel.archive import import_dumps
from fr_otel.cli import main
from fr_otel.sim import FleetSpec, simulate, write_fleet


def test_sql_types_are_what_duckdb_reads_from_a_rank_file(tmp_path: Path) -> None:
    path = tmp_path / "rank-000000.parquet"
    pq.write_table(schema.empty_table(), path)
    described = duckdb.sql(f"DESCRIBE SELECT * FROM read_parquet('{path}')").fetchall()
    assert tuple(name for name, *_ in described) == schema.COLUMNS
    # as DuckDB spells each type (it quotes only reserved field names)
    spelled = {
        name: duckdb.sql(f"SELECT typeof(CAST(NULL AS {kind}))").fetchall()[0][0]
        for name, kind in schema.COLUMN_SQL_TYPES.items()
    }
    assert {name: kind for name, kind, *_ in described} == spelled


def test_the_arrow_schema_holds_every_column_with_its_doc_and_version() -> None:
    record = schema.RECORD_SCHEMA
    assert tuple(record.names) == schema.COLUMNS
    assert record.metadata == {schema.SCHEMA_VERSION_KEY: schema.SCHEMA_VERSION.encode()}
    assert all(f.metadata == {b"doc": schema.COLUMN_DOCS[f.name].encode()} for f in record)
    assert record.field("frames").type == pa.list_(schema.FRAME_TYPE)
    assert record.field("input_sizes").type == schema.SIZES_TYPE == pa.list_(pa.list_(pa.int64()))
    assert pa.dictionary(pa.int32(), pa.list_(pa.int64())) == schema.MEMBERS_DICTIONARY
    assert not record.field("job").nullable and record.field("pg_ranks").nullable


_WITHOUT_PYARROW = """
import sys
sys.modules["pyarrow"] = None  # any import of it now fails
from fr_otel.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_an_archive_is_analysed_and_queried_without_pyarrow(tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    write_fleet(simulate(FleetSpec(world=8, entries=120, fault="size_mismatch", seed=1)), dumps)
    archive = tmp_path / "archive"
    assert import_dumps([dumps], archive=archive, job="j", incident="i").files_written
    out = tmp_path / "with.json"
    assert main(["analyze", str(archive), "--format", "json", "-o", str(out)]) == 1
    ran = subprocess.run(
        [sys.executable, "-c", _WITHOUT_PYARROW, "analyze", str(archive), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 1, ran.stderr
    assert json.loads(ran.stdout) == json.loads(out.read_text())
    queried = subprocess.run(
        [
            sys.executable,
            "-c",
            _WITHOUT_PYARROW,
            "sql",
            str(archive),
            "SELECT count(*) FROM entries",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert queried.returncode == 0, queried.stderr
    assert "960" in queried.stdout
