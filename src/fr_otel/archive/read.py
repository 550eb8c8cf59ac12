"""An incident's rows, read straight from its Parquet files into one Arrow table in the
canonical schema, for readers that want the rows themselves (export), not SQL over them
(the analyzer registers the same checked files in DuckDB instead)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from fr_otel.archive import footer_members
from fr_otel.archive.checks import CheckedFiles, check_files, describe, rank_files, read_pages
from fr_otel.archive.incidents import Incident
from fr_otel.errors import DumpError
from fr_otel.schema import MEMBERS_DICTIONARY, RECORD_SCHEMA, with_members_type


@dataclass(kw_only=True)
class IncidentRows:
    """One incident's rows, and the files that were left out."""

    incident: Incident
    table: pa.Table
    """Canonical schema (or its ``columns``); columns that older files lack are null."""
    checked: CheckedFiles

    @property
    def problems(self) -> list[DumpError]:
        return self.checked.problems


def read_incident(
    archive: Path,
    incident: Incident,
    *,
    columns: list[str] | None = None,
    shared_members: bool = False,
) -> IncidentRows:
    """Every readable row of ``incident``, files in name order (rank order).

    The members of large groups that a file keeps in its footer are put back on their
    rows (``archive.footer_members``). ``shared_members``: ``pg_ranks`` as a dictionary
    column, each rank file's distinct long lists once (``footer_members.shared``), not a
    copy in every row, which grows with ranks x rows x members: gigabytes already at 512
    ranks of a data-parallel job. A file whose footer or pages cannot be read is left out
    and listed in ``problems`` (its rank reads as without a dump). Raises ``ArchiveError``
    when no file can be read.
    """
    checked = check_files(rank_files(archive, incident))
    wanted = list(columns) if columns is not None else RECORD_SCHEMA.names
    schema = pa.schema([RECORD_SCHEMA.field(name) for name in wanted])
    members = "pg_ranks" in wanted
    if members:  # each file's lists once, its footer's too; copied onto rows at the end
        schema = with_members_type(schema, MEMBERS_DICTIONARY)
    tables = []
    for file in list(checked.good):
        read = columns
        if members and columns is not None and "pg_name" not in columns:
            read = [*columns, "pg_name"]  # which rows the footer's lists belong on
        try:
            raw = read_pages(file.path, read)
        except DumpError as problem:
            checked.leave_out(file, problem)
            continue
        if members:
            raw = footer_members.shared(_with_members_column(raw), file.footer_members())
        tables.append(_canonical(raw, schema))
    checked.require_some(describe(archive, incident))
    if not tables:
        table = schema.empty_table()
    else:
        table = footer_members.concat_rows(tables) if members else pa.concat_tables(tables)
    if members and not shared_members:
        table = footer_members.with_lists(table)
    return IncidentRows(incident=incident, table=table, checked=checked)


def _with_members_column(raw: pa.Table) -> pa.Table:
    """``raw`` with ``pg_ranks`` and ``pg_name`` (null where an older file lacks them)."""
    for name in ("pg_ranks", "pg_name"):
        if name not in raw.column_names:
            raw = raw.append_column(
                RECORD_SCHEMA.field(name), pa.nulls(raw.num_rows, RECORD_SCHEMA.field(name).type)
            )
    return raw


def _canonical(raw: pa.Table, schema: pa.Schema) -> pa.Table:
    """``raw`` in ``schema``: dictionary columns decoded, missing ones null."""
    arrays = [
        raw.column(field.name).cast(field.type)
        if field.name in raw.column_names
        else pa.nulls(raw.num_rows, field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)
