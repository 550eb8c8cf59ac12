"""How rank files are encoded: group member lists and counters delta-encoded, text
dictionary-encoded down to the leaves of nested columns, and nothing lost doing it."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from fr_otel.archive.layout import commit_staged, rank_file, write_staged
from tests.rows import canonical_row, canonical_table

WORLD = 8192
ROWS = 400


def _big_group_table() -> pa.Table:
    members = list(range(WORLD))
    tp = list(range(8))
    frames = [{"name": "step", "filename": "/srv/train/loop.py", "line": 141}]
    rows = [
        canonical_row(
            record_id=i,
            collective_seq_id=i,
            pg_name="0" if i % 2 else "1",
            pg_ranks=members if i % 2 else tp,
            frames=frames,
            time_created_ns=1_700_000_000_000_000_000 + i * 1_000_000,
        )
        for i in range(ROWS)
    ]
    return canonical_table(rows)


def _write(table: pa.Table, tmp_path: Path) -> Path:
    final = rank_file(tmp_path, "job", "inc", 0)
    commit_staged(write_staged(table, final), final)
    return final


def _encodings(path: Path) -> dict[str, tuple[str, ...]]:
    group = pq.ParquetFile(path).metadata.row_group(0)
    return {
        group.column(c).path_in_schema: group.column(c).encodings for c in range(group.num_columns)
    }


def test_a_world_sized_member_list_on_every_row_stays_small(tmp_path: Path) -> None:
    table = _big_group_table()
    path = _write(table, tmp_path)
    # plain, these lists are 200 x 8,192 int64 = 13 MB; lz4 took them to 6.6 MB (it
    # cannot see a repeat 64 KB back); delta-encoded, the whole file is ~18 KB
    assert path.stat().st_size < 100_000, path.stat().st_size
    assert pq.read_table(path).equals(table)
    counted = (
        duckdb.connect()
        .execute(
            f"SELECT count(*) FILTER (WHERE len(pg_ranks) = {WORLD}),"
            f" max(list_sum(pg_ranks)) FROM read_parquet('{path}')"
        )
        .fetchone()
    )
    assert counted == (ROWS // 2, WORLD * (WORLD - 1) // 2)


def test_nested_text_is_dictionary_encoded_and_counters_delta_encoded(tmp_path: Path) -> None:
    encodings = _encodings(_write(_big_group_table(), tmp_path))
    for leaf in (
        "frames.list.element.name",
        "frames.list.element.filename",
        "input_dtypes.list.element",
        "pg_name",
    ):
        assert "RLE_DICTIONARY" in encodings[leaf], (leaf, encodings[leaf])
    for leaf in ("pg_ranks.list.element", "record_id", "collective_seq_id", "time_created_ns"):
        assert "DELTA_BINARY_PACKED" in encodings[leaf], (leaf, encodings[leaf])
    assert "DELTA_BINARY_PACKED" not in encodings["frames.list.element.line"]
