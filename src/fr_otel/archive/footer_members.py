"""The members of a rank file's large groups, written once in its footer, not on every row.

``pg_ranks`` is a row's group members. A default group's list is on every one of its
rows, so a rank's file held rows x members integers: a flush of 2,000 entries in a
100,000-rank job was 200 million of them, gigabytes and many seconds to build and write
while the incident was being handled, past the flush deadline. Groups of more than
``FOOTER_MIN_MEMBERS`` members are therefore written as each rank file's key-value
metadata (``MEMBERS_KEY``: a JSON object, group name -> its members as rank runs,
``otel.rankranges``), and their rows' ``pg_ranks`` is null in the file. Readers of the
archive put the list back: the ``src`` view, and ``archive.read`` through ``shared``.

Such a file is marked with a schema version an fr_otel that does not know the footer
refuses (``foreign``) instead of reading the lifted rows as rows of a group whose members
are unknown: ``FOOTER_SCHEMA_VERSION`` when it was the first to have one, every later
version (``schema.SCHEMA_VERSION``) since.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from fr_otel.errors import DumpError
from fr_otel.otel.rankranges import from_ranges, to_ranges

if TYPE_CHECKING:
    import pyarrow as pa

MEMBERS_KEY = b"fr_otel.members"
FOOTER_SCHEMA_VERSION = "2"
"""The first archive schema version with ``MEMBERS_KEY`` (otherwise version 1's rows); a
file written now has ``schema.SCHEMA_VERSION``, which knows the footer too."""
FOOTER_MIN_MEMBERS = 1024
"""Groups with more members than this leave their list to the footer. Below it a row's
list costs little (delta-encoded, hundreds of times smaller than plain) and plain DuckDB
readers of the archive see it on the row."""

Members = dict[str, list[int]]
"""Group name -> its members, in group-rank order."""
Runs = dict[str, str]
"""Group name -> its members as rank runs (``otel.rankranges``: ``0-99999``), as the footer
holds them."""


def lift(rows: pa.Table) -> tuple[pa.Table, Members]:
    """One rank file's rows with the lists of its large groups taken out of ``pg_ranks``,
    and those lists. ``pg_ranks`` may be a dictionary column (the recorder's rows: one
    list per group, however many rows); the result's is a plain list column. A group name
    whose rows do not all carry the same large list keeps its lists on its rows."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = one_array(rows["pg_ranks"])
    list_type = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    if pa.types.is_dictionary(column.type):
        # equal large lists share a code (a dictionary may hold one list more than once:
        # chunks of one rank's rows, each with its own)
        codes, lists = (
            pc.take(_codes_of_large(column.dictionary), column.indices),
            column.dictionary,
        )
    else:
        codes, lists = _codes_of_large(column), column
    lengths = pc.list_value_length(lists)
    # typed scalars here: inferring an untyped one's type tries to import dateutil each
    # time where it is not installed (dumps/parse.py)
    large = pc.greater(lengths, pa.scalar(FOOTER_MIN_MEMBERS, lengths.type))
    row_large = pc.fill_null(pc.take(large, codes), False)
    if not pc.any(row_large).as_py():
        plain = column if lists is column else pc.take(lists, codes)
        return set_members(rows, plain.cast(list_type)), {}
    # every code each name with a large list uses (a name must use exactly one to lift)
    names = one_array(rows["pg_name"])
    candidates = pc.unique(pc.filter(names, row_large))
    pairs = (
        pa.table({"name": names, "code": codes})
        .filter(pc.is_in(names, value_set=candidates))
        .group_by(["name", "code"])
        .aggregate([])
    )
    per_name: dict[str, set[int | None]] = {}
    for name, code in zip(pairs["name"].to_pylist(), pairs["code"].to_pylist(), strict=True):
        per_name.setdefault(name, set()).add(code)
    large_codes = set(pc.indices_nonzero(large).to_pylist())
    lifted: Members = {}
    lifted_codes: list[int] = []
    for name, used in per_name.items():
        code = next(iter(used))
        if len(used) == 1 and code is not None and code in large_codes:
            lifted[name] = lists[code].as_py()
            lifted_codes.append(code)
    if not lifted:
        return set_members(rows, pc.take(lists, codes).cast(list_type)), {}
    kept = pc.if_else(
        pc.is_in(codes, value_set=pa.array(lifted_codes, codes.type)),
        pa.scalar(None, codes.type),
        codes,
    )
    return set_members(rows, pc.take(lists, kept).cast(list_type)), lifted


def as_written(rows: pa.Table) -> tuple[pa.Table, Runs]:
    """One rank file's rows as they are written (``lift``), the footer's members in the
    table's metadata, and those members as rank runs."""
    from fr_otel.schema import SCHEMA_VERSION, SCHEMA_VERSION_KEY

    rows, members = lift(rows)
    if not members:
        return rows, {}
    runs = {name: to_ranges(ranks) for name, ranks in members.items()}
    metadata = {
        **(rows.schema.metadata or {}),
        SCHEMA_VERSION_KEY: SCHEMA_VERSION.encode(),
        MEMBERS_KEY: json.dumps(runs).encode(),
    }
    return rows.replace_schema_metadata(metadata), runs


def with_lists(rows: pa.Table) -> pa.Table:
    """``rows`` with a dictionary ``pg_ranks`` decoded: every row its own list."""
    import pyarrow as pa
    import pyarrow.compute as pc

    column = rows["pg_ranks"]
    if not pa.types.is_dictionary(column.type):
        return rows
    column = one_array(column)
    return set_members(rows, pc.take(column.dictionary, column.indices))


def _codes_of_large(column: pa.ListArray, above: int | None = None) -> pa.Array:
    """Per list of ``column`` an index into it: each large list that repeats an earlier
    one shares that one's index (a group's rows carry one list), every other list its own
    (null for a null). Only the large lists are compared."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lengths = pc.list_value_length(column)
    least = FOOTER_MIN_MEMBERS if above is None else above
    large = pc.indices_nonzero(
        pc.fill_null(pc.greater(lengths, pa.scalar(least, lengths.type)), False)
    )
    codes = list(range(len(column)))
    if len(large):
        values = column.values
        starts = pc.take(column.offsets, large).to_pylist()
        seen: dict[int, list[tuple[int, pa.Array]]] = {}  # length -> distinct lists
        for row, start, length in zip(
            large.to_pylist(), starts, pc.take(lengths, large).to_pylist(), strict=True
        ):
            members = values.slice(start, length)
            for other, other_members in seen.setdefault(length, []):
                if members.equals(other_members):
                    codes[row] = other
                    break
            else:
                seen[length].append((row, members))
    return pa.array(codes, pa.int64(), mask=column.is_null())


def concat_rows(tables: list[pa.Table]) -> pa.Table:
    """Tables of rows as one, ``pg_ranks`` in one chunk: a dictionary column where any
    table has one (spans whose members came as runs), which Arrow would neither
    concatenate with plain lists nor take rows from across chunks."""
    import pyarrow as pa

    kinds = {t.schema.field("pg_ranks").type for t in tables}
    if len(kinds) == 1 and not any(pa.types.is_dictionary(k) for k in kinds):
        return pa.concat_tables(tables)
    dictionary = next(k for k in kinds if pa.types.is_dictionary(k))
    alike = []
    for table in tables:
        column = table["pg_ranks"]
        if not pa.types.is_dictionary(column.type):
            lists = column.combine_chunks()
            codes = pa.array(range(len(lists)), dictionary.index_type)
            table = set_members(table, pa.DictionaryArray.from_arrays(codes, lists))
        alike.append(table)
    joined = pa.concat_tables(alike)
    return set_members(joined, one_array(joined["pg_ranks"]))


SHARED_MIN_MEMBERS = 64
"""``shared`` gives lists longer than this one entry per distinct list; shorter ones (a
tp or pp group's) stay one per row, where comparing would cost more than copying."""


def shared(rows: pa.Table, runs: Runs) -> pa.Table:
    """One file's rows with ``pg_ranks`` as a dictionary column: each distinct long list
    once (its group's rows share it), the footer's lists (``runs``) for its lifted rows.
    For readers of a whole incident: in a data-parallel job every row's copy of the
    default group's list is most of the rows' memory."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from fr_otel.schema import RECORD_SCHEMA

    list_type = RECORD_SCHEMA.field("pg_ranks").type
    column = one_array(rows["pg_ranks"]).cast(list_type)
    codes = _codes_of_large(column, SHARED_MIN_MEMBERS)
    dictionary = column
    if runs:
        names = list(runs)
        footer = pa.array([members_of(runs[n]) for n in names], list_type)
        named = pc.index_in(one_array(rows["pg_name"]), value_set=pa.array(names, pa.string()))
        lifted = pc.and_(pc.is_null(column), pc.is_valid(named))
        past = pc.add(named.cast(pa.int64()), pa.scalar(len(column), pa.int64()))
        codes = pc.if_else(lifted, past, codes)
        dictionary = pa.concat_arrays([column, footer])
    # only the lists some row names: the rest of the file's copies are let go
    used = pc.unique(pc.drop_null(codes))
    indices = pc.index_in(codes, value_set=used).cast(pa.int32())
    return set_members(rows, pa.DictionaryArray.from_arrays(indices, pc.take(dictionary, used)))


def one_array(column: pa.ChunkedArray) -> pa.Array:
    """The column as one array: its only chunk as it is (``combine_chunks`` copies even
    that, 1.6 GB for a 100,000-member group's lists on 2,000 rows); a dictionary column's
    chunks (each rank's rows, with its own lists) with their dictionaries one after the
    other, which Arrow does not do for lists ("unification ... not implemented")."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column.num_chunks == 1:
        return column.chunk(0)
    if not pa.types.is_dictionary(column.type) or not column.num_chunks:
        return column.combine_chunks()
    indices, dictionaries, shift = [], [], 0
    for chunk in column.chunks:
        indices.append(pc.add(chunk.indices, pa.scalar(shift, chunk.indices.type)))
        dictionaries.append(chunk.dictionary)
        shift += len(chunk.dictionary)
    return pa.DictionaryArray.from_arrays(pa.concat_arrays(indices), pa.concat_arrays(dictionaries))


def set_members(rows: pa.Table, pg_ranks: pa.Array) -> pa.Table:
    """``rows`` with ``pg_ranks`` replaced, its field of the new column's type (a list or
    a dictionary of lists)."""
    at = rows.schema.get_field_index("pg_ranks")
    return rows.set_column(at, rows.schema.field(at).with_type(pg_ranks.type), pg_ranks)


def decode(raw: bytes, path: Path) -> Runs:
    """A footer's members (group name -> rank runs), checked; ``DumpError`` (``corrupt``)
    naming the file when they are not what ``as_written`` writes."""
    try:
        value = json.loads(raw)
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise ValueError("not an object of group name -> rank runs")
        for text in value.values():
            members_of(text)
        return value
    except ValueError as exc:  # json's errors are ValueErrors too
        raise DumpError(
            path, "corrupt", f"unreadable group members in its footer ({exc})"
        ) from None


@lru_cache(maxsize=1024)
def members_of(runs: str) -> tuple[int, ...]:
    """The members rank runs name (``ValueError`` when they are not runs). Each distinct
    text is expanded once: every rank file of a job names the default group alike, and at
    8,192 ranks a list per file was 67 million Python integers."""
    return tuple(from_ranges(runs))
