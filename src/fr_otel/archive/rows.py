"""Write canonical rows that did not come from dump files (spans read back, a recorder
flush) into the archive: one file per (job, incident, rank), plus the manifest."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from fr_otel.archive import footer_members
from fr_otel.archive.layout import commit_staged, discard_staged, rank_file, write_staged
from fr_otel.archive.manifest import GroupMembers, refresh_manifest
from fr_otel.schema import RECORD_SCHEMA, with_members_type

_FILE_KEY = ("job", "incident", "rank")
"""The columns that name a row's rank file."""


def write_rows(table: pa.Table, archive: Path) -> list[Path]:
    """Write ``table`` (canonical schema) into ``archive``; return the files written.

    Like ``import_dumps``: each rank's file replaces the one an earlier write left, so
    writing the same rows twice does not duplicate them. A rank file keeps its rows in
    the order ``table`` has them. ``pg_ranks`` may be a dictionary column (the recorder's
    rows: one list per group); the members of large groups are written in each file's
    footer (``archive.footer_members``).
    """
    table = _canonical(table)
    written: list[Path] = []
    staged: list[tuple[Path, Path]] = []
    files = _rank_files(table)
    try:
        for (job, incident, rank), rows in files:
            final = rank_file(archive, job, incident, rank)
            # large groups' members in the file's footer
            staged.append((write_staged(footer_members.as_written(rows)[0], final), final))
        for temporary, final in staged:
            commit_staged(temporary, final)
            written.append(final)
    finally:
        for temporary, final in staged:
            if final not in written:
                discard_staged(temporary)
    incidents = {(job, incident) for (job, incident, _), _ in files}
    groups = _groups(table)
    for job, incident in incidents:
        refresh_manifest(archive, job, incident, groups.get((job, incident), {}).values())
    return written


def _canonical(table: pa.Table) -> pa.Table:
    """``table`` in ``RECORD_SCHEMA``, but a dictionary ``pg_ranks`` left as it is (a cast
    would copy its list into every row)."""
    members = table.schema.field("pg_ranks")
    if not pa.types.is_dictionary(members.type):
        return table.select(RECORD_SCHEMA.names).cast(RECORD_SCHEMA)
    table = table.select(RECORD_SCHEMA.names).cast(with_members_type(RECORD_SCHEMA, members.type))
    # one chunk: Arrow takes and sorts no column whose chunks hold different list dictionaries
    return footer_members.set_members(table, footer_members.one_array(table["pg_ranks"]))


def _rank_files(table: pa.Table) -> list[tuple[tuple[str, str, int], pa.Table]]:
    """Each rank file's rows, as slices of ``table`` (sorted first, stably, unless each
    file's rows are together already, as a recorder flush's one rank is). A filter of the
    whole table per file would make an import quadratic in the ranks."""
    runs = _runs(table)
    if len({key for key, _, _ in runs}) < len(runs):
        order = pc.sort_indices(table, sort_keys=[(name, "ascending") for name in _FILE_KEY])
        table = table.take(order)
        runs = _runs(table)
    return [(key, table.slice(start, length)) for key, start, length in runs]


def _runs(table: pa.Table) -> list[tuple[tuple[str, str, int], int, int]]:
    """(key, first row, rows) of each run of consecutive rows of one rank file."""
    count = table.num_rows
    if count == 0:
        return []
    changed = pa.repeat(pa.scalar(False), count - 1)
    for name in _FILE_KEY:
        column = table[name].combine_chunks()
        changed = pc.or_(changed, pc.not_equal(column.slice(1), column.slice(0, count - 1)))
    starts = [0, *(i + 1 for i in pc.indices_nonzero(changed).to_pylist())]
    keys = table.select(list(_FILE_KEY)).take(pa.array(starts, pa.int64()))
    ends = [*starts[1:], count]
    return [
        ((job, incident, rank), start, end - start)
        for job, incident, rank, start, end in zip(
            *(keys[name].to_pylist() for name in _FILE_KEY), starts, ends, strict=True
        )
    ]


def _groups(table: pa.Table) -> dict[tuple[str, str], dict[str, GroupMembers]]:
    """Per (job, incident), each group that some row gives members, from its first such
    row. Only those rows become Python values: every row's list would be rows x members
    Python integers (a rank of a 12,500-rank group flushing 2,000 entries: 25 million)."""
    lengths = _member_counts(table["pg_ranks"])
    with_members = pc.indices_nonzero(pc.fill_null(pc.greater(lengths, 0), False))
    if len(with_members) == 0:
        return {}
    named = table.select(["job", "incident", "pg_name"]).take(with_members)
    first = named.append_column("row", with_members).group_by(["job", "incident", "pg_name"])
    rows = first.aggregate([("row", "min")])["row_min"]
    groups: dict[tuple[str, str], dict[str, GroupMembers]] = {}
    picked = table.select(["job", "incident", "pg_name", "pg_desc", "pg_ranks"])
    for row in picked.take(rows).to_pylist():
        groups.setdefault((row["job"], row["incident"]), {})[row["pg_name"]] = GroupMembers(
            name=row["pg_name"],
            desc=row["pg_desc"],
            ranks=tuple(row["pg_ranks"]),
            inferred=False,
        )
    return groups


def _member_counts(column: pa.ChunkedArray) -> pa.Array:
    """Each row's number of members (null where it has no list), without decoding a
    dictionary column's lists into every row."""
    column = footer_members.one_array(column)
    if pa.types.is_dictionary(column.type):
        return pc.take(pc.list_value_length(column.dictionary), column.indices)
    return pc.list_value_length(column)
