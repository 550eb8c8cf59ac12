"""Where the analyzer's rows come from: an archive, or a folder of dumps imported on the fly."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb

from fr_otel.archive import import_dumps
from fr_otel.archive.layout import PARQUET_GLOB
from fr_otel.errors import ArchiveError, DumpError


@dataclass(frozen=True, kw_only=True, slots=True)
class Incident:
    """One (job, incident) in an open source."""

    job: str
    incident: str


def is_archive(path: Path) -> bool:
    """An archive holds Parquet files under ``job=<job>/`` folders."""
    return path.is_dir() and any(path.glob("job=*/incident=*/*.parquet"))


def register_archive(connection: duckdb.DuckDBPyConnection, archive: Path) -> None:
    """Make ``src`` a view over every row of ``archive``."""
    pattern = (archive / PARQUET_GLOB).as_posix().replace("'", "''")
    connection.execute(
        "CREATE OR REPLACE VIEW src AS SELECT * FROM read_parquet("
        f"'{pattern}', hive_partitioning = true, hive_types_autocast = false,"
        " union_by_name = true)"
    )


def pick_incident(
    connection: duckdb.DuckDBPyConnection, where: str, job: str | None, incident: str | None
) -> Incident:
    """The incident to analyse: the one asked for, else the most recent dump in the archive."""
    rows = connection.execute(
        "SELECT job, incident, max(dump_time_ns) AS t FROM src"
        " WHERE ($job IS NULL OR job = $job) AND ($incident IS NULL OR incident = $incident)"
        " GROUP BY ALL ORDER BY t DESC NULLS LAST, job, incident",
        {"job": job, "incident": incident},
    ).fetchall()
    if not rows:
        wanted = ", ".join(
            f"{k}={v}" for k, v in (("job", job), ("incident", incident)) if v is not None
        )
        raise ArchiveError(f"{where} holds no entries" + (f" for {wanted}" if wanted else ""))
    return Incident(job=rows[0][0], incident=rows[0][1])


@dataclass(kw_only=True)
class Source:
    """An open source of rows: the connection (with its ``src`` view) and what to analyse."""

    connection: duckdb.DuckDBPyConnection
    incident: Incident
    import_problems: list[DumpError]
    """Dump files that could not be imported when analysing dumps directly."""


@contextlib.contextmanager
def open_source(
    path: str | Path, *, job: str | None = None, incident: str | None = None
) -> Iterator[Source]:
    """Open ``path`` for analysis.

    ``path`` is an archive (as ``fr-otel import`` writes) or anything ``fr-otel import``
    takes (dump files, folders, globs), which is then imported into a temporary archive.
    Raises ``ArchiveError`` when there is nothing to analyse and ``DumpError`` when no
    dump could be imported.
    """
    path = Path(path)
    with contextlib.ExitStack() as stack:
        problems: list[DumpError] = []
        if is_archive(path):
            archive = path
        else:
            archive = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fr-otel-")))
            report = import_dumps([path], archive=archive, job=job, incident=incident)
            problems = report.problems
            if not report.files_written:
                if problems:
                    raise problems[0]
                raise ArchiveError(f"{path}: no Flight Recorder dumps or archive found there")
            job = incident = None  # the temporary archive holds exactly this import
        connection = stack.enter_context(duckdb.connect())
        register_archive(connection, archive)
        chosen = pick_incident(connection, str(path), job, incident)
        yield Source(connection=connection, incident=chosen, import_problems=problems)
