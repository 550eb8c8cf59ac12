"""An incident's entries as the first pass makes them (``sql/01_entries.sql``), kept beside
its rank files so that analysing the incident need not make them.

``ARCHIVE/job=<job>/incident=<incident>/_entries.<key>.duckdb``: a DuckDB database
holding the table ``e``, not matched by the ``*.parquet`` globs that read an archive's
rows. The first pass reads every row and reduces its size and dtype lists to
fingerprints, a large part of a re-analysis. An analysis attaches the database read-only
and reads ``e`` through a view: nothing is copied. Copying the table out of a file would
cost a temporary table's build, column by column, whatever the file's format; reading the
attached table is as fast as reading a temporary one once its blocks are loaded. Its rows
are sorted by group, sequence number and rank: the hashes of a slot's members then run
alike, which DuckDB stores as runs, so the database is smaller than in rank order (though
larger than a zstd Parquet file of the same rows).

The analysis changes ``e`` in two places only (a failed gloo collective's entries, a
snapshot's entries past its frontier): ``writable`` first copies it into a temporary
table there.

Like ``_files.json``, it is derived data, trusted only while it is what the first pass
would make now. Its ``key`` is a hash of everything that pass depends on: the statements
as they will run, with their parameters and constants, the canonical views and macros
they read (``source.register_archive``, ``schema.ENTRY_MACROS``), fr_otel's and DuckDB's
versions (DuckDB's ``hash`` and its storage format may change between them), and the
name, size, modification time and inode of every file of the incident's folder. A file
written, replaced or removed since, by an import or a recorder flushing late, changes the
key, and the pass runs again. So does a damaged database: loading reads every column
once (little extra: blocks the analysis reads next anyway), and DuckDB checks each
block's checksum as it reads it.

``fr-otel import`` writes it, under a temporary name renamed into place. An analysis
never writes it: writing is a sizeable part of a first analysis, the one someone is
waiting on, and a verdict must not wait on a cache. Analysing dumps, or an
archive with a damaged file, never uses one.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import duckdb

import fr_otel
from fr_otel.analysis.sqlfiles import sql_string
from fr_otel.archive.layout import staging_path
from fr_otel.schema import ENTRY_MACROS

logger = logging.getLogger(__name__)

PREFIX = "_entries."
SUFFIX = ".duckdb"
_EARLIER_SUFFIXES = (".pq",)
"""What earlier versions kept (Parquet): never read, removed when a new one is saved."""
TABLE = "e"
"""The first pass's table."""
ALIAS = "fr_otel_prepared"
"""The attached database's name in an analysis's connection."""
_ORDER = "gid, seq, rank"


@dataclass(frozen=True, kw_only=True, slots=True)
class PreparedEntries:
    """Where an incident's prepared entries are, or would be, for one ``key``."""

    folder: Path
    """The incident's folder (``layout.partition_dir``)."""
    key: str

    @property
    def path(self) -> Path:
        return self.folder / f"{PREFIX}{self.key}{SUFFIX}"


def is_prepared_file(name: str) -> bool:
    return name.startswith(PREFIX) and name.endswith((SUFFIX, *_EARLIER_SUFFIXES))


def prepared_entries(
    connection: duckdb.DuckDBPyConnection,
    folder: Path,
    statements: list[str],
    params: dict[str, object],
) -> PreparedEntries | None:
    """The prepared entries of the incident in ``folder`` for the first pass's
    ``statements`` (as they will run, with ``params``) over the views of ``connection``;
    None when the folder cannot be listed."""
    digest = hashlib.sha256()

    def add(*parts: object) -> None:
        for part in parts:
            digest.update(repr(part).encode())
            digest.update(b"\0")

    add(fr_otel.__version__, duckdb.__version__, statements, sorted(params.items()))
    add(
        ENTRY_MACROS,
        connection.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal ORDER BY view_name"
        ).fetchall(),
    )
    try:
        with os.scandir(folder) as entries:
            listed = sorted(
                (entry.name, entry.stat(follow_symlinks=True))
                for entry in entries
                if not entry.name.startswith(".") and not is_prepared_file(entry.name)
            )
    except OSError:
        return None
    for name, stat in listed:
        add(name, stat.st_size, stat.st_mtime_ns, stat.st_ino)
    return PreparedEntries(folder=folder, key=digest.hexdigest()[:32])


def load(connection: duckdb.DuckDBPyConnection, prepared: PreparedEntries) -> bool:
    """Make the first pass's table, as a view of ``prepared`` attached read-only; False
    (and nothing made) when there is none, or it cannot be read."""
    path = prepared.path
    if not path.is_file():
        return False
    try:
        connection.execute(f"DETACH DATABASE IF EXISTS {ALIAS}")  # another incident's
        connection.execute(f"ATTACH {sql_string(path.as_posix())} AS {ALIAS} (READ_ONLY)")
    except duckdb.Error as exc:
        logger.debug("%s: not used (%s); the first pass runs", path, exc)
        return False
    try:
        columns = [
            name
            for (name,) in connection.execute(
                "SELECT column_name FROM duckdb_columns() WHERE database_name = ?"
                " AND table_name = ? ORDER BY column_index",
                [ALIAS, TABLE],
            ).fetchall()
        ]
        if not columns:
            raise duckdb.CatalogException(f"no table {TABLE}")
        # every block read once: a damaged one fails its checksum here, not mid-analysis
        connection.execute(
            f"SELECT {', '.join(f'max({name})' for name in columns)} FROM {ALIAS}.{TABLE}"
        ).fetchall()
        connection.execute(f"CREATE OR REPLACE TEMP VIEW {TABLE} AS SELECT * FROM {ALIAS}.{TABLE}")
    except duckdb.Error as exc:
        logger.debug("%s: not used (%s); the first pass runs", path, exc)
        connection.execute(f"DROP VIEW IF EXISTS {TABLE}")
        connection.execute(f"DETACH {ALIAS}")
        return False
    return True


def writable(connection: duckdb.DuckDBPyConnection) -> None:
    """Make the first pass's table one the analysis may change: a temporary copy where
    ``load`` made it a view of the attached database."""
    loaded = connection.execute(
        "SELECT count(*) FROM duckdb_views() WHERE temporary AND view_name = ?", [TABLE]
    ).fetchone()
    if loaded and loaded[0]:
        connection.execute(f"DROP VIEW {TABLE}")
        connection.execute(f"CREATE TEMP TABLE {TABLE} AS SELECT * FROM {ALIAS}.{TABLE}")


def save(connection: duckdb.DuckDBPyConnection, prepared: PreparedEntries) -> None:
    """Write the first pass's table as ``prepared``, replacing any other key's. Raises
    ``OSError`` (a read-only archive, a full disk) or ``duckdb.Error``, and then leaves
    nothing behind."""
    final = prepared.path
    staging = staging_path(final)
    # DuckDB's write-ahead log, gone once the database is detached (checkpointed)
    log = staging.with_name(staging.name + ".wal")
    out = f"{ALIAS}_out"
    try:
        connection.execute(f"ATTACH {sql_string(staging.as_posix())} AS {out}")
        try:
            connection.execute(
                f"CREATE TABLE {out}.{TABLE} AS SELECT * FROM {TABLE} ORDER BY {_ORDER}"
            )
        finally:
            connection.execute(f"DETACH {out}")
        os.replace(staging, final)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    finally:
        log.unlink(missing_ok=True)
    for other in prepared.folder.iterdir():
        if other != final and is_prepared_file(other.name):
            other.unlink(missing_ok=True)
