"""Where the analyzer's rows come from: an archive, or a folder of dumps imported on the fly."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from fr_otel.archive.layout import PARQUET_GLOB, partition_dir
from fr_otel.archive.manifest import Manifest, read_manifest
from fr_otel.errors import ArchiveError, DumpError
from fr_otel.schema import RECORD_SCHEMA


@dataclass(frozen=True, kw_only=True, slots=True)
class Incident:
    """One (job, incident) in an open source."""

    job: str
    incident: str


def is_archive(path: Path) -> bool:
    """An archive holds Parquet files under ``job=<job>/`` folders."""
    return path.is_dir() and any(path.glob("job=*/incident=*/*.parquet"))


def register_archive(
    connection: duckdb.DuckDBPyConnection, archive: Path, *, only: Incident | None = None
) -> None:
    """Make ``src`` a view over the rows of ``archive`` (of one incident when ``only``),
    in the current canonical schema. Columns that older files lack read as NULL.
    """
    files = (
        partition_dir(archive, only.job, only.incident) / "*.parquet"
        if only is not None
        else archive / PARQUET_GLOB
    )
    pattern = files.as_posix().replace("'", "''")
    # one incident's files come from one import, so they share a schema; a whole archive
    # may mix fr_otel versions (reading every file's schema costs a little)
    union = "false" if only is not None else "true"
    connection.execute(
        "CREATE OR REPLACE VIEW src_files AS SELECT * FROM read_parquet("
        f"'{pattern}', hive_partitioning = true, hive_types_autocast = false,"
        f" union_by_name = {union})"
    )
    present = {row[0] for row in connection.execute("DESCRIBE src_files").fetchall()}
    columns = [
        name
        if name in present
        else f"CAST(NULL AS {_sql_type(RECORD_SCHEMA.field(name).type)}) AS {name}"
        for name in RECORD_SCHEMA.names
    ]
    connection.execute(f"CREATE OR REPLACE VIEW src AS SELECT {', '.join(columns)} FROM src_files")


def _sql_type(dtype: pa.DataType) -> str:
    if pa.types.is_list(dtype):
        return f"{_sql_type(dtype.value_type)}[]"
    if pa.types.is_struct(dtype):
        fields = ", ".join(f'"{f.name}" {_sql_type(f.type)}' for f in dtype)
        return f"STRUCT({fields})"
    simple = {
        pa.string(): "VARCHAR",
        pa.int64(): "BIGINT",
        pa.float64(): "DOUBLE",
        pa.bool_(): "BOOLEAN",
    }
    return simple[dtype]


def pick_incident(archive: Path, job: str | None, incident: str | None) -> Incident:
    """The incident to analyse: the one asked for, else the most recently written one.

    Read off the archive's folders (``job=<job>/incident=<incident>``), not its rows.
    """
    candidates: list[tuple[int, str, str]] = []
    for folder in archive.glob("job=*/incident=*"):
        found_job = folder.parent.name.removeprefix("job=")
        found_incident = folder.name.removeprefix("incident=")
        if (job is not None and found_job != job) or (
            incident is not None and found_incident != incident
        ):
            continue
        mtimes = [f.stat().st_mtime_ns for f in folder.glob("*.parquet")]
        if mtimes:
            candidates.append((max(mtimes), found_job, found_incident))
    if not candidates:
        wanted = ", ".join(
            f"{k}={v}" for k, v in (("job", job), ("incident", incident)) if v is not None
        )
        raise ArchiveError(f"{archive} holds no entries" + (f" for {wanted}" if wanted else ""))
    _, found_job, found_incident = max(candidates)
    return Incident(job=found_job, incident=found_incident)


@dataclass(kw_only=True)
class Source:
    """An open source of rows: the connection (with its ``src`` view) and what to analyse."""

    connection: duckdb.DuckDBPyConnection
    incident: Incident
    import_problems: list[DumpError]
    """Dump files that could not be imported when analysing dumps directly."""
    manifest: Manifest | None = None
    """The incident's manifest, when the archive has one."""


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
            from fr_otel.archive import import_dumps

            archive = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fr-otel-")))
            report = import_dumps([path], archive=archive, job=job, incident=incident)
            problems = report.problems
            if not report.files_written:
                if problems:
                    raise problems[0]
                if report.warnings:  # dumps, but not one with an entry: no evidence at all
                    raise ArchiveError(
                        f"{path}: none of its {len(report.warnings)} Flight Recorder dump(s)"
                        " holds an entry (FR off, or dumped without collectives): nothing to"
                        " analyse"
                    )
                raise ArchiveError(f"{path}: no Flight Recorder dumps or archive found there")
            job = incident = None  # the temporary archive holds exactly this import
        chosen = pick_incident(archive, job, incident)
        connection = stack.enter_context(duckdb.connect())
        register_archive(connection, archive, only=chosen)
        manifest = read_manifest(archive, chosen.job, chosen.incident)
        yield Source(
            connection=connection, incident=chosen, import_problems=problems, manifest=manifest
        )
