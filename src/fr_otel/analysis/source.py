"""Where the analyzer's rows come from: an archive, or a folder of dumps imported on the fly.

Every rank file is checked before DuckDB reads it (its size, its Parquet footer, the
archive schema version that wrote it), so that one damaged file is named, its rank is
treated as having no dump (unknown, never blamed), and the rest is still read.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import duckdb
import pyarrow as pa

from fr_otel.analysis.sqlfiles import prepare
from fr_otel.archive.layout import Writer, partition_dir, writers
from fr_otel.archive.manifest import Manifest, read_manifest
from fr_otel.errors import ArchiveError, DumpError, IncidentChoiceError
from fr_otel.schema import RECORD_SCHEMA

SCHEMA_VERSION_KEY = b"fr_otel.schema_version"
SCHEMA_VERSION = (RECORD_SCHEMA.metadata or {}).get(SCHEMA_VERSION_KEY, b"1").decode()
"""The archive schema version this fr_otel writes and reads."""

_PARQUET_MAGIC = b"PAR1"
_verify_pages: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "fr_otel_verify_pages", default=False
)
"""Also decode every page of every file (see ``reading_damaged_files``)."""
_DUCKDB_READ_ERRORS = ("IOException", "InvalidInputException", "Error")
"""What DuckDB raises when a file's pages (not its footer) cannot be decoded; ``Error``
itself, not a subclass (those are about SQL)."""
_CHECK_THREADS = 8
"""Footers read at once: the reads are small and wait on the disk, not the CPU."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Incident:
    """One (job, incident) in an open source."""

    job: str
    incident: str


def is_archive(path: Path) -> bool:
    """An archive holds ``job=<job>/incident=<incident>/`` folders (the Parquet files may
    be damaged, or still being written)."""
    return path.is_dir() and any(path.glob("job=*/incident=*"))


# --- checking rank files ----------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class RankFile:
    """A rank file that DuckDB can read, and what its footer says."""

    path: Path
    job: str
    incident: str
    rank: int | None
    rows: int
    time_span: tuple[int, int] | None
    """(first, last) ``time_created_ns`` from the footer's statistics, when it has them."""
    columns: frozenset[str]


def _partition(path: Path) -> tuple[str, str, int | None]:
    job = path.parent.parent.name.removeprefix("job=")
    incident = path.parent.name.removeprefix("incident=")
    stem = path.stem.removeprefix("rank-")
    return job, incident, int(stem) if stem.isdigit() else None


def check_rank_file(path: Path, *, pages: bool = False) -> RankFile:
    """The file's footer, or a ``DumpError`` saying in one line why it cannot be read:
    ``empty``, ``truncated``, ``corrupt`` or ``foreign`` (written for another archive
    schema version, or not by fr_otel). With ``pages``, every page is decoded too."""
    import pyarrow.parquet as pq

    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                raise DumpError(path, "empty", "0 bytes: its write never happened (disk full?)")
            if size < 12:
                raise DumpError(path, "truncated", f"{size} bytes: cut short, no Parquet footer")
            handle.seek(size - 8)
            tail = handle.read(8)
    except OSError as exc:
        raise DumpError(path, "unreadable", exc.strerror or str(exc)) from None
    footer_length = int.from_bytes(tail[:4], "little")
    if tail[4:] != _PARQUET_MAGIC or footer_length + 12 > size:
        raise DumpError(path, "truncated", f"{size} bytes: cut short, no Parquet footer at its end")
    try:
        metadata = pq.read_metadata(path)
    except (OSError, pa.ArrowException) as exc:
        detail = " ".join(str(exc).split())  # one line
        raise DumpError(path, "corrupt", f"unreadable Parquet footer ({detail})") from None
    version = (metadata.metadata or {}).get(SCHEMA_VERSION_KEY)
    if version is not None and version.decode(errors="replace") != SCHEMA_VERSION:
        raise DumpError(
            path,
            "foreign",
            f"written for archive schema version {version.decode(errors='replace')}; this"
            f" fr_otel reads version {SCHEMA_VERSION} (import the dumps again, or use the"
            " fr_otel that wrote it)",
        )
    columns = frozenset(name.split(".", 1)[0] for name in metadata.schema.names)
    if version is None:
        _check_columns(path, metadata)
    if pages:
        try:
            pq.ParquetFile(path).read()
        except (OSError, pa.ArrowException, ValueError) as exc:
            detail = " ".join(str(exc).split())
            raise DumpError(path, "corrupt", f"unreadable data ({detail})") from None
    job, incident, rank = _partition(path)
    return RankFile(
        path=path,
        job=job,
        incident=incident,
        rank=rank,
        rows=metadata.num_rows,
        time_span=_time_span(metadata),
        columns=columns,
    )


def _check_columns(path: Path, metadata: object) -> None:
    """A file without fr_otel's version mark (older fr_otel, or another writer): its
    canonical columns must have the canonical types."""
    try:
        schema = metadata.schema.to_arrow_schema()  # type: ignore[attr-defined]
    except (pa.ArrowException, ValueError) as exc:
        detail = " ".join(str(exc).split())
        raise DumpError(path, "corrupt", f"unreadable Parquet schema ({detail})") from None
    for name in ("rank", "record_id", "collective_seq_id", "op"):
        if name not in schema.names:
            raise DumpError(path, "foreign", f"no {name!r} column: not an fr_otel archive file")
    for field_ in schema:
        if field_.name in RECORD_SCHEMA.names:
            expected = RECORD_SCHEMA.field(field_.name).type
            if field_.type != expected and not (
                pa.types.is_dictionary(field_.type) and field_.type.value_type == expected
            ):
                raise DumpError(
                    path,
                    "foreign",
                    f"column {field_.name!r} is {field_.type}, not {expected}: written by"
                    " another archive schema",
                )


def _time_span(metadata: object) -> tuple[int, int] | None:
    md = metadata
    try:
        index = md.schema.names.index("time_created_ns")  # type: ignore[attr-defined]
    except ValueError:
        return None
    low: int | None = None
    high: int | None = None
    for group in range(md.num_row_groups):  # type: ignore[attr-defined]
        stats = md.row_group(group).column(index).statistics  # type: ignore[attr-defined]
        if stats is None or not stats.has_min_max:
            return None
        low = stats.min if low is None else min(low, stats.min)
        high = stats.max if high is None else max(high, stats.max)
    if low is None or high is None or high <= 0:
        return None
    return int(low), int(high)


@dataclass(kw_only=True)
class CheckedFiles:
    """The rank files of an archive (or of one incident), sorted into good and bad."""

    good: list[RankFile] = field(default_factory=list)
    problems: list[DumpError] = field(default_factory=list)
    unusable: list[tuple[str, str, int | None]] = field(default_factory=list)
    """(job, incident, rank) of each file in ``problems``."""

    def unusable_ranks(self, job: str, incident: str) -> set[int]:
        return {
            rank for j, i, rank in self.unusable if j == job and i == incident and rank is not None
        }


def check_files(paths: Iterable[Path]) -> CheckedFiles:
    """Check every file (see ``check_rank_file``), a few at a time."""
    files = sorted(paths)
    pages = _verify_pages.get()  # read here: the pool's threads do not see it

    def one(path: Path) -> RankFile | DumpError:
        try:
            return check_rank_file(path, pages=pages)
        except DumpError as exc:
            return exc

    if len(files) > 16:
        with ThreadPoolExecutor(max_workers=_CHECK_THREADS) as pool:
            results = list(pool.map(one, files))
    else:
        results = [one(path) for path in files]
    checked = CheckedFiles()
    for path, result in zip(files, results, strict=True):
        if isinstance(result, DumpError):
            checked.problems.append(result)
            checked.unusable.append(_partition(path))
        else:
            checked.good.append(result)
    return checked


def rank_files(archive: Path, only: Incident | None = None) -> list[Path]:
    folder = partition_dir(archive, only.job, only.incident) if only is not None else None
    if folder is not None:
        return sorted(folder.glob("*.parquet"))
    return sorted(archive.glob("job=*/incident=*/*.parquet"))


def is_read_error(exc: BaseException) -> bool:
    """A DuckDB error about decoding a file (not about SQL)."""
    kind = type(exc)
    return kind.__module__.split(".")[0] in ("duckdb", "_duckdb") and (
        kind.__name__ in _DUCKDB_READ_ERRORS
    )


_T = TypeVar("_T")


def reading_damaged_files(action: Callable[[], _T]) -> _T:
    """Run ``action`` (which opens the archive); if DuckDB fails to decode a file whose
    footer looked fine, run it again with every page of every file checked first, so the
    damaged files are named and left out instead."""
    try:
        return action()
    except Exception as exc:
        if not is_read_error(exc):
            raise
    token = _verify_pages.set(True)
    try:
        return action()
    finally:
        _verify_pages.reset(token)


# --- the src view -----------------------------------------------------------------------


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def register_archive(
    connection: duckdb.DuckDBPyConnection, archive: Path, *, only: Incident | None = None
) -> CheckedFiles:
    """Make ``src`` a view over the rows of ``archive`` (of one incident when ``only``),
    in the current canonical schema. Columns that older files lack read as NULL.

    Files that cannot be read are left out, listed in the returned ``problems`` and in
    the temporary table ``unusable_files`` (job, incident, rank, path, problem, detail).
    Raises ``ArchiveError`` when no file at all can be read.
    """
    checked = check_files(rank_files(archive, only))
    where = (
        f"{archive} (job={only.job} incident={only.incident})" if only is not None else str(archive)
    )
    if not checked.good:
        if not checked.problems:
            raise ArchiveError(f"{where} holds no Parquet rank files")
        lines = "\n".join(f"  {p}" for p in checked.problems[:20])
        more = (
            f"\n  ... and {len(checked.problems) - 20} more" if len(checked.problems) > 20 else ""
        )
        raise ArchiveError(
            f"{where}: none of its {len(checked.problems)} Parquet rank files can be read:\n"
            f"{lines}{more}"
        )
    connection.execute(
        "CREATE OR REPLACE TEMP TABLE unusable_files (job VARCHAR, incident VARCHAR,"
        " rank BIGINT, path VARCHAR, problem VARCHAR, detail VARCHAR)"
    )
    if checked.problems:
        connection.executemany(
            "INSERT INTO unusable_files VALUES (?, ?, ?, ?, ?, ?)",
            [
                (job, incident, rank, problem.path, problem.problem, problem.detail)
                for (job, incident, rank), problem in zip(
                    checked.unusable, checked.problems, strict=True
                )
            ],
        )
        files = "[" + ", ".join(_quote(f.path.as_posix()) for f in checked.good) + "]"
    else:
        glob = (
            partition_dir(archive, only.job, only.incident) / "*.parquet"
            if only is not None
            else archive / "job=*" / "incident=*" / "*.parquet"
        )
        files = _quote(glob.as_posix())
    # files written by one fr_otel share their columns; an archive may mix versions
    union = "true" if len({f.columns for f in checked.good}) > 1 else "false"
    connection.execute(
        "CREATE OR REPLACE VIEW src_files AS SELECT * FROM read_parquet("
        f"{files}, hive_partitioning = true, hive_types_autocast = false,"
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
    prepare(connection)  # the rules queries over src share (entry_p2p, entry_done)
    return checked


def unusable_files(connection: duckdb.DuckDBPyConnection) -> list[DumpError]:
    """The files ``register_archive`` left out in this connection."""
    try:
        rows = connection.execute(
            "SELECT path, problem, detail FROM unusable_files ORDER BY path"
        ).fetchall()
    except duckdb.CatalogException:
        return []
    return [DumpError(path, problem, detail) for path, problem, detail in rows]


def usable_manifest(
    connection: duckdb.DuckDBPyConnection, archive: Path, job: str, incident: str
) -> Manifest | None:
    """The incident's manifest, with ranks whose file ``register_archive`` left out moved
    from ``ranks`` (which the analyzer reads as "dumped") to ``missing_ranks``."""
    manifest = read_manifest(archive, job, incident)
    if manifest is None:
        return None
    try:
        rows = connection.execute(
            "SELECT rank FROM unusable_files WHERE job = ? AND incident = ? AND rank IS NOT NULL",
            [job, incident],
        ).fetchall()
    except duckdb.CatalogException:
        return manifest
    return without_ranks(manifest, {int(rank) for (rank,) in rows})


def without_ranks(manifest: Manifest, ranks: set[int]) -> Manifest:
    if not ranks:
        return manifest
    return dataclasses.replace(
        manifest,
        ranks=tuple(r for r in manifest.ranks if r not in ranks),
        missing_ranks=tuple(sorted(set(manifest.missing_ranks) | ranks)),
    )


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


# --- which incident ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class IncidentFolder:
    job: str
    incident: str
    folder: Path
    files: int
    """Parquet rank files in it (readable or not)."""
    written_ns: int
    """When its newest file was written (0 when it has none yet)."""
    writer: Writer | None
    """The import writing it right now, if one is."""


def incident_folders(archive: Path) -> list[IncidentFolder]:
    """Every incident folder of ``archive``, by job and then by when it was written."""
    live, _ = writers(archive)
    found: list[IncidentFolder] = []
    for folder in archive.glob("job=*/incident=*"):
        if not folder.is_dir():
            continue
        job = folder.parent.name.removeprefix("job=")
        incident = folder.name.removeprefix("incident=")
        mtimes = []
        for path in folder.glob("*.parquet"):
            with contextlib.suppress(OSError):
                mtimes.append(path.stat().st_mtime_ns)
        writer = next((w for w in live if w.writes(job, incident)), None)
        if not mtimes and writer is None:
            continue  # an empty folder (a run's staging place, a removed incident)
        found.append(
            IncidentFolder(
                job=job,
                incident=incident,
                folder=folder,
                files=len(mtimes),
                written_ns=max(mtimes, default=0),
                writer=writer,
            )
        )
    found.sort(key=lambda f: (f.job, f.written_ns, f.incident))
    return found


def _names(values: Iterable[str]) -> str:
    return ", ".join(sorted(set(values)))


def being_written(incident: IncidentFolder) -> ArchiveError:
    return ArchiveError(
        f"job={incident.job} incident={incident.incident} is being written by"
        f" {incident.writer.describe() if incident.writer else 'an import'} right now:"
        " analyse it once the import has finished"
    )


def pick_incident(archive: Path, job: str | None, incident: str | None) -> Incident:
    """The incident to read: the one asked for, or the only one there is.

    Raises ``ArchiveError`` naming what exists when the job or incident asked for is not
    there, ``IncidentChoiceError`` listing the incidents when several match, and
    ``ArchiveError`` when the incident is being written by an import right now.
    """
    folders = incident_folders(archive)
    if not folders:
        live, _ = writers(archive)
        if live:
            raise ArchiveError(
                f"{archive} is being written by {live[0].describe()}: no incident is complete"
                " yet; analyse it once the import has finished"
            )
        raise ArchiveError(f"{archive} holds no incidents (no job=*/incident=*/*.parquet)")
    if job is not None and not any(f.job == job for f in folders):
        raise ArchiveError(
            f"{archive} has no job {job!r}; its jobs: {_names(f.job for f in folders)}"
        )
    candidates = [
        f
        for f in folders
        if (job is None or f.job == job) and (incident is None or f.incident == incident)
    ]
    if not candidates:
        scope = [f for f in folders if job is None or f.job == job]
        raise ArchiveError(
            f"{archive} has no incident {incident!r}"
            + (f" in job {job!r}" if job is not None else "")
            + f"; its incidents: {_names(f.incident for f in scope)}"
        )
    if len(candidates) > 1:
        of_job = f" of job {job}" if job is not None else ""
        lines = "\n".join(
            f"  --job {f.job} --incident {f.incident}"
            + (" (being written)" if f.writer is not None else "")
            for f in candidates
        )
        raise IncidentChoiceError(
            f"{archive} holds {len(candidates)} incidents{of_job}; say which one"
            f" (fr-otel incidents {archive} describes each):\n{lines}",
            [(f.job, f.incident) for f in candidates],
        )
    chosen = candidates[0]
    if chosen.writer is not None:
        raise being_written(chosen)
    return Incident(job=chosen.job, incident=chosen.incident)


@dataclass(kw_only=True)
class IncidentSummary:
    """What ``fr-otel incidents`` says about one incident, read off its files' footers
    and its manifest (no rows are read)."""

    job: str
    incident: str
    ranks: list[int]
    """Ranks with a readable file."""
    missing_ranks: list[int] | None
    """Ranks without a dump (none, or an unreadable file); None without a manifest."""
    time_span: tuple[int, int] | None
    entries: int
    problems: list[DumpError]
    writer: Writer | None


def summarize_incidents(archive: Path, job: str | None = None) -> list[IncidentSummary]:
    """Every incident of ``archive`` (of ``job``), oldest first within each job."""
    folders = incident_folders(archive)
    if job is not None:
        if folders and not any(f.job == job for f in folders):
            raise ArchiveError(
                f"{archive} has no job {job!r}; its jobs: {_names(f.job for f in folders)}"
            )
        folders = [f for f in folders if f.job == job]
    summaries = []
    for folder in folders:
        checked = check_files(folder.folder.glob("*.parquet"))
        spans = [f.time_span for f in checked.good if f.time_span is not None]
        ranks = sorted(f.rank for f in checked.good if f.rank is not None)
        manifest = read_manifest(archive, folder.job, folder.incident)
        missing = None
        if manifest is not None:
            unusable = checked.unusable_ranks(folder.job, folder.incident)
            missing = sorted((set(manifest.missing_ranks) | unusable) - set(ranks))
        summaries.append(
            IncidentSummary(
                job=folder.job,
                incident=folder.incident,
                ranks=ranks,
                missing_ranks=missing,
                time_span=(min(a for a, _ in spans), max(b for _, b in spans)) if spans else None,
                entries=sum(f.rows for f in checked.good),
                problems=checked.problems,
                writer=folder.writer,
            )
        )
    summaries.sort(
        key=lambda s: (s.job, s.time_span[0] if s.time_span else 0, s.incident),
    )
    return summaries


# --- opening a source ---------------------------------------------------------------------


@dataclass(kw_only=True)
class Source:
    """An open source of rows: the connection (with its ``src`` view) and what to analyse."""

    connection: duckdb.DuckDBPyConnection
    incident: Incident
    import_problems: list[DumpError]
    """Dump files that could not be imported when analysing dumps directly, and rank
    files of the archive that could not be read (their ranks count as without a dump)."""
    manifest: Manifest | None = None
    """The incident's manifest, when the archive has one."""


@contextlib.contextmanager
def open_source(
    path: str | Path, *, job: str | None = None, incident: str | None = None
) -> Iterator[Source]:
    """Open ``path`` for analysis.

    ``path`` is an archive (as ``fr-otel import`` writes) or anything ``fr-otel import``
    takes (dump files, folders, globs), which is then imported into a temporary archive.
    Raises ``ArchiveError`` when there is nothing to analyse (``IncidentChoiceError``
    when there are several incidents and none was named) and ``DumpError`` when no dump
    could be imported.
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
                unusable = [p for p in problems if p.problem != "missing"]
                if unusable:
                    raise unusable[0]
                if problems:  # nothing there: no such path, or no dump in it
                    raise ArchiveError(str(problems[0]))
                if report.warnings:  # dumps, but not one with an entry: no evidence at all
                    raise ArchiveError(
                        f"{path}: none of its {len(report.warnings)} Flight Recorder dump(s)"
                        " holds an entry (FR off, or dumped without collectives): nothing to"
                        " analyse"
                    )
                raise ArchiveError(f"{path}: no Flight Recorder dumps or archive found there")
            if len(report.incidents) > 1:
                raise IncidentChoiceError(
                    f"{path} holds dumps of {len(report.incidents)} runs (told apart by their"
                    " times, FR and library versions and world size), never analysed together:"
                    f" import them with fr-otel import {path} --archive ARCHIVE, then analyse"
                    f" each with fr-otel analyze ARCHIVE --incident ID:\n"
                    + "\n".join(f"  {run}" for run in report.runs_described()),
                    [(report.job, i) for i in report.incidents],
                )
            job = incident = None  # the temporary archive holds exactly this import
        chosen = pick_incident(archive, job, incident)
        connection = stack.enter_context(duckdb.connect())
        checked = register_archive(connection, archive, only=chosen)
        manifest = read_manifest(archive, chosen.job, chosen.incident)
        if manifest is not None:
            manifest = without_ranks(manifest, checked.unusable_ranks(chosen.job, chosen.incident))
        yield Source(
            connection=connection,
            incident=chosen,
            import_problems=problems + checked.problems,
            manifest=manifest,
        )
