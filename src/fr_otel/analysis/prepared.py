"""An incident's entries as the first pass makes them (``sql/01_entries.sql``), kept beside
its rank files so that analysing the incident need not make them.

``ARCHIVE/job=<job>/incident=<incident>/_entries.<key>.pq``: Parquet, but not matched by
the ``*.parquet`` globs that read an archive's rows. The first pass reads every row and
reduces its size and dtype lists to fingerprints: at 256 ranks x 2,000 entries it is a
third of a re-analysis (0.28-0.37 s), where loading its result takes 0.08 s.

Like ``_files.json``, it is derived data, trusted only while it is what the first pass
would make now. Its ``key`` is a hash of everything that pass depends on: the statements
as they will run, with their parameters and constants, the canonical views and macros
they read (``source.register_archive``, ``schema.ENTRY_MACROS``), fr_otel's and DuckDB's
versions (DuckDB's ``hash`` may change between them), and the name, size, modification
time and inode of every file of the incident's folder. A file written, replaced or
removed since, by an import or a recorder flushing late, changes the key, and the pass
runs again.

``fr-otel import`` writes it, under a temporary name renamed into place: there it costs
0.5 s at 256 ranks (1.1 s without). An analysis never writes it: at 1,024 ranks that
took 0.57 s of a 2.3 s first analysis, the one someone is waiting on, and a verdict must
not wait on a cache. Analysing dumps, or an archive with a damaged file, never uses one.
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
SUFFIX = ".pq"
TABLE = "e"
"""The first pass's table."""


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
    return name.startswith(PREFIX) and name.endswith(SUFFIX)


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
    """Make the first pass's table from ``prepared``; False (and nothing made) when there
    is none, or it cannot be read."""
    path = prepared.path
    if not path.is_file():
        return False
    try:
        connection.execute(
            f"CREATE OR REPLACE TEMP TABLE {TABLE} AS"
            # its folder's name=value pairs are not columns of it
            f" SELECT * FROM read_parquet({sql_string(path.as_posix())}, hive_partitioning = false)"
        )
    except duckdb.Error as exc:
        logger.debug("%s: not used (%s); the first pass runs", path, exc)
        connection.execute(f"DROP TABLE IF EXISTS {TABLE}")
        return False
    return True


def save(connection: duckdb.DuckDBPyConnection, prepared: PreparedEntries) -> None:
    """Write the first pass's table as ``prepared``, replacing any other key's. Raises
    ``OSError`` (a read-only archive, a full disk) or ``duckdb.Error``, and then leaves
    nothing behind."""
    final = prepared.path
    staging = staging_path(final)
    try:
        connection.execute(
            f"COPY {TABLE} TO {sql_string(staging.as_posix())} (FORMAT parquet, COMPRESSION zstd)"
        )
        os.replace(staging, final)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    for other in prepared.folder.iterdir():
        if other != final and is_prepared_file(other.name):
            other.unlink(missing_ok=True)
