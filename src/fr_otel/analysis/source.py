"""Where the analyzer's rows come from: an archive, or a folder of dumps imported on the fly,
registered in DuckDB as the ``src`` view.

Finding, checking and reading an archive's rank files is ``fr_otel.archive``'s
(``checks``, ``incidents``); the names are imported here too, for the analyzer's modules
and the CLI that have always found them here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import logging
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from fr_otel.analysis.sqlfiles import prepare, sql_string
from fr_otel.archive import footer_members, scratch
from fr_otel.archive.checks import (
    CheckedFiles,
    RankFile,
    check_files,
    check_rank_file,
    describe,
    pages_verified,
    rank_files,
    verifying_pages,
)
from fr_otel.archive.incidents import (
    Incident,
    IncidentFolder,
    IncidentSummary,
    being_written,
    incident_folders,
    is_archive,
    pick_incident,
    summarize_incidents,
)
from fr_otel.archive.layout import partition_dir
from fr_otel.archive.manifest import Manifest, read_manifest
from fr_otel.config import analysis_memory
from fr_otel.errors import ArchiveError, DumpError, IncidentChoiceError
from fr_otel.schema import COLUMN_SQL_TYPES, COLUMNS, SCHEMA_VERSION, SCHEMA_VERSION_KEY

if TYPE_CHECKING:  # the importer itself is loaded only to import dumps
    import duckdb
    import pyarrow as pa

    from fr_otel.archive.importer import ImportReport, RankMembers

logger = logging.getLogger(__name__)

__all__ = [
    "SCHEMA_VERSION",
    "SCHEMA_VERSION_KEY",
    "CheckedFiles",
    "Incident",
    "IncidentFolder",
    "IncidentSummary",
    "RankFile",
    "Source",
    "being_written",
    "check_files",
    "check_rank_file",
    "incident_folders",
    "is_archive",
    "is_read_error",
    "open_source",
    "pick_incident",
    "rank_files",
    "reading_damaged_files",
    "register_archive",
    "summarize_incidents",
    "unusable_files",
    "usable_manifest",
    "without_ranks",
]

_DUCKDB_READ_ERRORS = ("IOException", "InvalidInputException", "Error")
"""What DuckDB raises when a file's pages (not its footer) cannot be decoded; ``Error``
itself, not a subclass (those are about SQL)."""


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
    with verifying_pages():
        return action()


# --- the src view ---------------------------------------------------------------------


def register_archive(
    connection: duckdb.DuckDBPyConnection,
    archive: Path,
    *,
    only: Incident | None = None,
    written: list[RankFile] | None = None,
    members: RankMembers | None = None,
    scratch_tables: Mapping[Path, pa.Table] | None = None,
) -> CheckedFiles:
    """Make ``src`` a view over the rows of ``archive`` (of one incident when ``only``),
    in the current canonical schema. Columns that older files lack read as NULL. The view
    ``src_rows`` holds the same rows with ``pg_ranks`` only as the files hold it (see
    ``members``), for readers that need no member lists.

    Files that cannot be read are left out, listed in the returned ``problems`` and in
    the temporary table ``unusable_files`` (job, incident, rank, path, problem, detail).
    Raises ``ArchiveError`` when no file at all can be read. ``written``: every rank file
    there, as the import that just wrote them describes them (``ImportReport.rank_files``),
    so their footers are not read again (seconds at thousands of ranks); they are when
    every page is being verified (``verifying_pages``). ``members``: each rank's groups'
    members, for files written without ``pg_ranks`` (``ImportReport.members``): ``src``
    reads the column from them, as it reads the lists of the large groups whose members a
    file keeps in its footer (``archive.footer_members``). ``scratch_tables``: the rows of
    scratch files in ``written`` that the import mapped already
    (``ImportReport.scratch_tables``).
    """
    scratch_files = written is not None and any(scratch.is_scratch(f.path) for f in written)
    if written is not None and (scratch_files or not pages_verified()):
        # scratch files are Arrow, just written by this process: nothing to verify
        checked = CheckedFiles(good=sorted(written, key=lambda f: f.path))
    else:
        checked = check_files(rank_files(archive, only))
    checked.require_some(describe(archive, only))
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
        files = "[" + ", ".join(sql_string(f.path.as_posix()) for f in checked.good) + "]"
    else:
        glob = (
            partition_dir(archive, only.job, only.incident) / "*.parquet"
            if only is not None
            else archive / "job=*" / "incident=*" / "*.parquet"
        )
        files = sql_string(glob.as_posix())
    rank_groups = _rank_groups(checked.good, members)
    if rank_groups:
        _register_members(connection, rank_groups)
    else:  # an earlier registration's, in this connection
        connection.execute("DROP TABLE IF EXISTS src_rank_groups")
        connection.execute("DROP TABLE IF EXISTS src_memberships")
    if scratch_files:
        scan = _register_scratch(
            connection, "src_scratch", [f.path for f in checked.good], scratch_tables
        )
    else:
        # files written by one fr_otel share their columns; an archive may mix versions
        scan = _scan(files, union=len({f.columns for f in checked.good}) > 1)
    connection.execute(f"CREATE OR REPLACE VIEW src_files AS SELECT * FROM {scan}")
    connection.execute(f"CREATE OR REPLACE VIEW src AS {_canonical(connection, 'src_files')}")
    connection.execute(
        f"CREATE OR REPLACE VIEW src_rows AS {_canonical(connection, 'src_files', members=False)}"
    )
    # from lists, not Arrow (pyarrow is not imported to read an archive: fr_otel.schema),
    # nor executemany, which inserts a row at a time: a statement per rank file
    connection.execute(
        "CREATE OR REPLACE TABLE src_rank_files AS SELECT unnest($job::VARCHAR[]) AS job,"
        " unnest($incident::VARCHAR[]) AS incident, unnest($rank::BIGINT[]) AS rank,"
        " unnest($path::VARCHAR[]) AS path",
        {
            "job": [f.job for f in checked.good],
            "incident": [f.incident for f in checked.good],
            "rank": [f.rank for f in checked.good],
            "path": [f.path.as_posix() for f in checked.good],
        },
    )
    prepare(connection)  # the rules queries over src share (entry_p2p, entry_done)
    return checked


def _register_scratch(
    connection: duckdb.DuckDBPyConnection,
    name: str,
    paths: list[Path],
    ready: Mapping[Path, pa.Table] | None = None,
) -> str:
    """Register scratch files (``archive.scratch``) as ``name``, a scan of their rows
    (``ready``: see ``scratch.rows``). The connection's own: unlike a view, its cursors do
    not see it."""
    connection.register(name, scratch.rows(paths, ready))
    return name


def _scan(files: str, union: bool) -> str:
    return (
        f"read_parquet({files}, hive_partitioning = true, hive_types_autocast = false,"
        f" union_by_name = {'true' if union else 'false'})"
    )


def _copy_table(connection: duckdb.DuckDBPyConnection, name: str, table: pa.Table) -> None:
    """Table ``name``, a copy of ``table``. Not TEMP: like the views, seen by the
    connection's cursors (fr-otel sql's). From Arrow, not executemany, which inserts a row
    at a time: a statement per rank file."""
    connection.register(f"{name}_arrow", table)
    connection.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM {name}_arrow")
    connection.unregister(f"{name}_arrow")


_MEMBERS_OF_ROW = (
    "(SELECT m.ranks FROM src_rank_groups g JOIN src_memberships m ON m.key = g.key"
    " WHERE g.job = r.job AND g.incident = r.incident AND g.rank = r.rank"
    " AND g.pg_name = r.pg_name)"
)
"""A row's ``pg_ranks`` where its file has none: its rank's member list of its group."""

_RankGroups = dict[tuple[str, str, int | None], dict[str, list[int] | str | None]]
"""(job, incident, rank) -> group name -> members (a list, or a footer's rank runs)."""


def _rank_groups(files: list[RankFile], members: RankMembers | None) -> _RankGroups:
    """Each rank's groups' members that its rows do not carry: from the import that wrote
    files without ``pg_ranks`` (``members``), and from the footers of the files that keep
    their large groups' lists there."""
    found: _RankGroups = {}
    if members is not None:
        job_of = {(f.incident, f.rank): f.job for f in files}
        for (incident, rank), groups in members.items():
            job = job_of.get((incident, rank))
            if job is not None:
                found[(job, incident, rank)] = dict(groups)
    for file in files:
        if file.members:
            found.setdefault((file.job, file.incident, file.rank), {}).update(file.members)
    return found


def _register_members(connection: duckdb.DuckDBPyConnection, members: _RankGroups) -> None:
    """Tables ``src_memberships`` (key, ranks: each distinct member list once) and
    ``src_rank_groups`` (job, incident, rank, pg_name, key), which ``_canonical`` reads."""
    import pyarrow as pa

    from fr_otel.schema import RECORD_SCHEMA

    lists: list[Sequence[int]] = []
    by_content: dict[tuple[int, ...], int] = {}
    by_identity: dict[int, int] = {}  # the import shares one list per membership
    by_runs: dict[str, int] = {}  # footers name a group alike in every file
    rows: dict[str, list[object]] = {
        "job": [],
        "incident": [],
        "rank": [],
        "pg_name": [],
        "key": [],
    }
    for (job, incident, rank), groups in members.items():
        for name, ranks in groups.items():
            if ranks is None:
                continue  # no row: the subquery's NULL
            if isinstance(ranks, str):
                key = by_runs.get(ranks)
                if key is None:
                    listed = footer_members.members_of(ranks)
                    key = by_runs[ranks] = by_content.setdefault(listed, len(lists))
                    if key == len(lists):
                        lists.append(listed)
            else:
                key = by_identity.get(id(ranks))
                if key is None:
                    key = by_identity[id(ranks)] = by_content.setdefault(tuple(ranks), len(lists))
                    if key == len(lists):
                        lists.append(ranks)
            for column, value in zip(rows, (job, incident, rank, name, key), strict=True):
                rows[column].append(value)
    memberships = pa.table(
        {
            "key": pa.array(range(len(lists)), pa.int32()),
            "ranks": pa.array(lists, RECORD_SCHEMA.field("pg_ranks").type),
        }
    )
    rank_groups = pa.table(
        {
            "job": pa.array(rows["job"], pa.string()),
            "incident": pa.array(rows["incident"], pa.string()),
            "rank": pa.array(rows["rank"], pa.int64()),
            "pg_name": pa.array(rows["pg_name"], pa.string()),
            "key": pa.array(rows["key"], pa.int32()),
        }
    )
    _copy_table(connection, "src_memberships", memberships)
    _copy_table(connection, "src_rank_groups", rank_groups)


def _canonical(
    connection: duckdb.DuckDBPyConnection, relation: str, *, members: bool = True
) -> str:
    """SELECT of ``relation``'s rows in the current schema (what it lacks as NULL, but
    ``pg_ranks`` from ``src_rank_groups`` when there is one: ``_register_members``).
    ``members=False``: ``pg_ranks`` only as the files hold it, for a reader that never
    reads the column (``src_rows``): DuckDB keeps the scalar subquery that fills it in the
    plan of every scan, read or not."""
    present = {row[0] for row in connection.execute(f"DESCRIBE {relation}").fetchall()}
    members = members and bool(
        connection.execute(
            "SELECT 1 FROM duckdb_tables() WHERE table_name = 'src_rank_groups' AND NOT temporary"
        ).fetchall()
    )

    def column(name: str) -> str:
        if name == "pg_ranks" and members:
            if name in present:  # null on the rows of a group whose list is in the footer
                return f"coalesce(r.pg_ranks, {_MEMBERS_OF_ROW}) AS {name}"
            return f"{_MEMBERS_OF_ROW} AS {name}"
        if name in present:
            return name
        return f"CAST(NULL AS {COLUMN_SQL_TYPES[name]}) AS {name}"

    columns = [column(name) for name in COLUMNS]
    return f"SELECT {', '.join(columns)} FROM {relation} AS r"


def rows_of_ranks(
    connection: duckdb.DuckDBPyConnection, job: str, incident: str, ranks: set[int]
) -> str:
    """A relation (SQL) holding at least ``ranks``' rows of the incident, read from those
    ranks' files alone: ``src`` makes DuckDB open every file of the incident, which at a
    thousand ranks costs a third of a second for a handful of rows."""
    import duckdb

    try:
        rows = connection.execute(
            "SELECT DISTINCT path FROM src_rank_files WHERE job = ? AND incident = ? AND rank"
            f" IN ({', '.join(str(int(r)) for r in sorted(ranks)) or 'NULL'}) ORDER BY path",
            [job, incident],
        ).fetchall()
    except duckdb.CatalogException:  # src made by someone else (a test's own view)
        rows = []
    if not rows:
        return "src"
    paths = [Path(path) for (path,) in rows]
    if all(scratch.is_scratch(path) for path in paths):
        # named by its files: asked again for the same ranks, it replaces itself
        digest = hashlib.sha1("\0".join(path for (path,) in rows).encode()).hexdigest()[:16]
        name = _register_scratch(connection, f"src_scratch_{digest}", paths)
        return f"({_canonical(connection, name)})"
    files = "[" + ", ".join(sql_string(path) for (path,) in rows) + "]"
    return f"({_canonical(connection, f'(SELECT * FROM {_scan(files, union=True)})')})"


def unusable_files(connection: duckdb.DuckDBPyConnection) -> list[DumpError]:
    """The files ``register_archive`` left out in this connection."""
    import duckdb

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
    import duckdb

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
    entries_folder: Path | None = None
    """Where the first pass's result may be kept and reused (``prepared``): the
    incident's folder when the source is an archive whose every file could be read."""


def connect(
    stack: contextlib.ExitStack,
    memory_limit: str | None = None,
    *,
    meanwhile: Callable[[], object] | None = None,
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection, closed by ``stack``, that holds at most ``memory_limit``
    (``config.analysis_memory``) and spills the rest into a temporary folder that
    ``stack`` removes (DuckDB's own default is ``.tmp`` in the working directory).
    ``meanwhile``: the caller's own work, done in this thread while another opens the
    database (DuckDB lets go of the GIL for that)."""
    import duckdb

    spill = stack.enter_context(tempfile.TemporaryDirectory(prefix="fr-otel-spill-"))
    settings: dict[str, str | bool | int | float | list[str]] = {
        "memory_limit": analysis_memory(memory_limit),
        "temp_directory": spill,
        "checkpoint_threshold": _NO_CHECKPOINT,
    }
    if meanwhile is None:
        opened = duckdb.connect(config=settings)
    else:
        opened = _connect_while(settings, meanwhile)
    connection = stack.enter_context(opened)
    # DuckDB draws a progress bar on standard output under any statement past 2 s (a
    # large incident's first pass): there it would land in a verdict written as JSON
    connection.execute("SET enable_progress_bar = false")
    return connection


def _connect_while(
    settings: dict[str, str | bool | int | float | list[str]], meanwhile: Callable[[], object]
) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect(config=settings)`` in a thread of its own while ``meanwhile`` runs
    in this one. Opening a database is a noticeable part of a short re-analysis; beside
    the loading of the analysis's modules its time is hidden rather than added."""
    import duckdb

    opened: list[duckdb.DuckDBPyConnection] = []
    failed: list[BaseException] = []

    def open_database() -> None:
        try:
            opened.append(duckdb.connect(config=settings))
        except BaseException as exc:  # raised in the caller's thread below
            failed.append(exc)

    thread = threading.Thread(target=open_database, name="fr-otel-connect", daemon=True)
    thread.start()
    try:
        meanwhile()
    except BaseException:
        thread.join()
        for connection in opened:
            connection.close()
        raise
    thread.join()
    if failed:
        raise failed[0]
    return opened[0]


_NO_CHECKPOINT = "1000TB"
"""DuckDB checkpoints even an in-memory database once 16 MiB of changes accumulate,
compressing its tables. The analysis's tables live for one command: a checkpoint is a
large share of an analysis's time that no later read repays, and it does not lower the
analysis's peak memory."""


def _import_for_analysis(
    stack: contextlib.ExitStack, path: Path, job: str | None, incident: str | None
) -> tuple[Path, ImportReport]:
    """Import the dumps at ``path`` into a temporary archive that ``stack`` removes: in
    memory where they fit (``scratch.memory_folder``); if that import cannot write there
    (the folder filled up meanwhile), again in the system's temporary folder."""
    memory = scratch.memory_folder([path])
    if memory is not None:
        try:
            return _import_into(stack, memory, path, job, incident)
        except ArchiveError as exc:
            logger.warning("%s; importing %s into the temporary folder instead", exc, path)
    return _import_into(stack, None, path, job, incident)


def _import_into(
    stack: contextlib.ExitStack,
    folder: Path | None,
    path: Path,
    job: str | None,
    incident: str | None,
) -> tuple[Path, ImportReport]:
    from fr_otel.archive import import_dumps

    with contextlib.ExitStack() as attempt:
        archive = Path(
            attempt.enter_context(tempfile.TemporaryDirectory(prefix="fr-otel-", dir=folder))
        )
        report = import_dumps(
            [path],
            archive=archive,
            job=job,
            incident=incident,
            members_in_files=False,
            scratch_files=True,
            meanwhile=_load_analysis,
        )
        stack.push(attempt.pop_all())  # kept, and removed with the analysis
    return archive, report


def _load_analysis() -> None:
    """Load DuckDB and the analysis's modules, which nothing before the analysis needs, in
    time this process would otherwise spend waiting: while the import's workers convert
    dumps (where the workers leave a core free the loads cost no time at all; where they
    fill every core, little is gained), or while DuckDB opens the database."""
    importlib.import_module("fr_otel.analysis.engine")


@contextlib.contextmanager
def open_source(
    path: str | Path,
    *,
    job: str | None = None,
    incident: str | None = None,
    memory_limit: str | None = None,
) -> Iterator[Source]:
    """Open ``path`` for analysis.

    ``path`` is an archive (as ``fr-otel import`` writes) or anything ``fr-otel import``
    takes (dump files, folders, globs), which is then imported into a temporary archive.
    Raises ``ArchiveError`` when there is nothing to analyse (``IncidentChoiceError``
    when there are several incidents and none was named) and ``DumpError`` when no dump
    could be imported. ``memory_limit``: see ``connect``.
    """
    path = Path(path)
    with contextlib.ExitStack() as stack:
        problems: list[DumpError] = []
        written: list[RankFile] | None = None
        members: RankMembers | None = None
        scratch_tables: Mapping[Path, pa.Table] | None = None
        chosen: Incident | None = None
        in_archive = is_archive(path)
        if in_archive:
            archive = path
        else:
            archive, report = _import_for_analysis(stack, path, job, incident)
            members = report.members
            scratch_tables = report.scratch_tables
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
            if len(report.rank_files) == len(report.files_written):
                written = report.rank_files
            if written and scratch.is_scratch(written[0].path):
                # of one incident (asserted above), in files only the import's list names
                chosen = Incident(job=written[0].job, incident=written[0].incident)
        if chosen is None:
            chosen = pick_incident(archive, job, incident)
        connection = connect(stack, memory_limit, meanwhile=_load_analysis)
        checked = register_archive(
            connection,
            archive,
            only=chosen,
            written=None
            if written is None
            else [f for f in written if (f.job, f.incident) == (chosen.job, chosen.incident)],
            members=members,
            scratch_tables=scratch_tables,
        )
        manifest = read_manifest(archive, chosen.job, chosen.incident)
        if manifest is not None:
            manifest = without_ranks(manifest, checked.unusable_ranks(chosen.job, chosen.incident))
        # an analysis retried with every page decoded reads every row itself
        keep = in_archive and not checked.problems and not pages_verified()
        yield Source(
            connection=connection,
            incident=chosen,
            import_problems=problems + checked.problems,
            manifest=manifest,
            entries_folder=partition_dir(archive, chosen.job, chosen.incident) if keep else None,
        )
