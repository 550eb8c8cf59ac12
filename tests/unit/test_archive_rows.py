"""Rows that did not come from dump files (spans read back, a recorder flush) written into
the archive: each rank's rows in its own file, in the order they came, and each group's
members in the manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from fr_otel.archive.rows import write_rows
from tests.rows import canonical_row, canonical_table


def _rows_of(path: Path) -> list[tuple[int, int]]:
    table = pq.read_table(path, columns=["rank", "record_id"])
    return list(zip(table["rank"].to_pylist(), table["record_id"].to_pylist(), strict=True))


def _manifest(archive: Path, job: str, incident: str) -> dict[str, object]:
    path = archive / f"job={job}" / f"incident={incident}" / "_incident.json"
    return json.loads(path.read_text())


def test_interleaved_rows_land_in_their_rank_files_in_their_order(tmp_path: Path) -> None:
    # spans read back arrive in any order: ranks and incidents interleaved, and a rank's
    # rows not in record order
    records = {0: [5, 3, 9], 1: [2, 8], 2: [7, 1, 4, 6]}
    rows = []
    for position in range(4):
        for rank, ids in records.items():
            if position < len(ids):
                for incident in ("a", "b"):
                    rows.append(
                        canonical_row(
                            incident=incident, rank=rank, record_id=ids[position] + position
                        )
                    )
    written = write_rows(canonical_table(rows), tmp_path)

    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == [
        f"job=job/incident={incident}/rank-{rank:06d}.parquet"
        for incident in ("a", "b")
        for rank in (0, 1, 2)
    ]
    for path in written:
        rank = int(path.stem.removeprefix("rank-"))
        expected = [(rank, ids + position) for position, ids in enumerate(records[rank])]
        assert _rows_of(path) == expected, path
    for incident in ("a", "b"):
        assert _manifest(tmp_path, "job", incident)["ranks"] == [0, 1, 2]


def test_one_rank_flush_is_written_as_it_came(tmp_path: Path) -> None:
    rows = [canonical_row(rank=3, record_id=i) for i in (4, 2, 7, 1)]
    (written,) = write_rows(canonical_table(rows), tmp_path)
    assert _rows_of(written) == [(3, 4), (3, 2), (3, 7), (3, 1)]


def test_the_manifest_takes_each_groups_members_from_its_first_row_with_any(
    tmp_path: Path,
) -> None:
    rows = [
        canonical_row(rank=0, record_id=0, pg_name="tp", pg_desc="mesh_tp", pg_ranks=None),
        canonical_row(rank=0, record_id=1, pg_name="tp", pg_desc="mesh_tp", pg_ranks=[]),
        canonical_row(rank=0, record_id=2, pg_name="tp", pg_desc="mesh_tp", pg_ranks=[0, 1]),
        canonical_row(rank=1, record_id=0, pg_name="tp", pg_desc="mesh_tp", pg_ranks=[0, 1, 2]),
        canonical_row(rank=1, record_id=1, pg_name="0", pg_desc="default_pg", pg_ranks=[0, 1]),
        canonical_row(
            incident="other", rank=0, record_id=0, pg_name="tp", pg_desc="mesh_tp", pg_ranks=[0]
        ),
        canonical_row(rank=1, record_id=2, pg_name="dp", pg_desc="mesh_dp", pg_ranks=None),
    ]
    write_rows(canonical_table(rows), tmp_path)

    groups = {g["name"]: g for g in _manifest(tmp_path, "job", "inc")["groups"]}
    assert groups == {
        "0": {"name": "0", "desc": "default_pg", "ranks": [0, 1], "inferred": False},
        "tp": {"name": "tp", "desc": "mesh_tp", "ranks": [0, 1], "inferred": False},
    }
    (other,) = _manifest(tmp_path, "job", "other")["groups"]
    assert other["ranks"] == [0]
