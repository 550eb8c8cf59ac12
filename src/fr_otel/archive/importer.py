"""Import a set of dump files into an archive, in parallel, losing nothing good.

Each worker process reads one dump (restricted unpickler), converts it and writes its
Parquet file under a temporary name. The parent then does what needs the whole fleet
(telling runs apart, duplicate ranks, group membership for gloo dumps, missing ranks) and
renames the files into place, or, with ``strict``, discards them all when any file had a
problem.

**Runs are never mixed.** Dumps of one run of a job agree on their FR format version,
their communication library version, their world size and their run id (the recorder's
``run=R`` folder, when their path has one), and their entries' times
overlap: every rank was issuing collectives until the job stopped. Dumps that fall into
separate runs by these rules (a job restarted, two runs' dumps copied into one folder)
are imported as separate incidents, ``<incident>-run1``, ``-run2``... oldest first.

**Jobs.** A dump under a ``job=J`` folder (the recorder saves torch's own dumps as
``_fr_dumps/job=J/run=R/incident=I/``) is imported under job ``J`` unless the caller names
a job: trace ids derive from the job, so another job name gives other traces than the
recorder's. One import may so write several jobs' incidents, each under its own import
lock (a lock names one job). Dumps of different ``incident=I`` folders are never one
incident; their incident ids are derived from the dumps like any other's, not taken from
the folder, whose incident in the same archive holds the recorder's own rows.

**Spans.** OTLP JSON lines files (``fr-otel export --otlp-json``, the Collector's file
exporter), named or found in folders, are read back into rows (``fr_otel.otel.otlp_import``)
instead: each span carries its job, incident and rank, a span delivered twice (a
Collector delivers at least once) is imported once, and a file that is not such spans,
or is cut short, is named with its problem like a bad dump. Spans and dumps are imported
separately: they name their incidents differently.

**Interruptions.** While it writes, an import holds a lock in ``ARCHIVE/.imports`` that
readers see (``layout.writers``). ``SIGTERM`` or ``SIGINT`` (``KeyboardInterrupt``, or
``errors.Terminated``) stops the workers and removes every temporary file; workers die
with the parent even when it is killed outright, and the next import sweeps what a
killed one left (``layout.sweep``).
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from fr_otel import config
from fr_otel.archive import footer_members, scratch
from fr_otel.archive.checks import RankFile, index_facts
from fr_otel.archive.file_index import write_index
from fr_otel.archive.layout import (
    ImportLock,
    commit_staged,
    discard_staged,
    partition_dir,
    rank_file,
    read_staged,
    sweep,
    write_staged,
)
from fr_otel.archive.manifest import (
    GroupMembers,
    Manifest,
    describe_ranks,
    describe_span,
    exclusive,
    refresh_manifest,
)
from fr_otel.dumps.discover import DumpFile, discover
from fr_otel.dumps.load import load_dump_file
from fr_otel.dumps.membership import (
    Membership,
    apply_memberships,
    expected_ranks,
    needs_membership,
    resolve_memberships,
)
from fr_otel.dumps.parse import EXPANSION_FACTOR, EXPANSION_FLOOR, GroupSeen
from fr_otel.errors import ArchiveError, ConfigError, DumpError
from fr_otel.pathnames import printable
from fr_otel.schema import RECORD_SCHEMA

ProgressCallback = Callable[[int, int], None]
"""Called with (files done, files total) as the import goes."""
RankMembers = dict[tuple[str, int], dict[str, list[int] | None]]
"""(incident, rank) -> group name -> the group's members (``ImportReport.members``)."""
_RankKey = tuple[str, str, int]
"""(job, incident, rank): one rank file."""

_WRITTEN_COLUMNS = frozenset(RECORD_SCHEMA.names)
"""A dump's table has the canonical columns (``dump_to_table``), and so has its file."""
_INLINE_MAX_FILES = 4
"""Below this many files a worker pool costs more than it saves."""

RUN_GAP_NS = 1_000_000_000
"""Dumps whose entries' times are further apart than this (after chaining overlapping
ones) are of different runs. Ranks of one run issue collectives until it stops; hosts'
clocks agree to well within this."""


@dataclass(frozen=True, kw_only=True, slots=True)
class IncidentImported:
    """One incident an import wrote: its ranks, the ranks without a dump, its times."""

    incident: str
    ranks: tuple[int, ...]
    missing_ranks: tuple[int, ...]
    time_span: tuple[int, int] | None

    def describe(self) -> str:
        text = f"{self.incident}: ranks {describe_ranks(self.ranks)}"
        if self.missing_ranks:
            text += f", no dump from {describe_ranks(self.missing_ranks)}"
        if self.time_span is not None:
            text += f", entries {describe_span(self.time_span)}"
        return text


@dataclass(kw_only=True)
class ImportReport:
    """What an import did. ``problems`` lists every file that could not be imported."""

    archive: Path
    job: str
    """The job written, or the jobs, joined by commas (dumps under several ``job=J``
    folders, spans of several jobs)."""
    incidents: list[str] = field(default_factory=list)
    job_incidents: list[tuple[str, str]] = field(default_factory=list)
    """(job, incident) of each incident written, in ``incidents`` order."""
    ranks: list[int] = field(default_factory=list)
    entries: int = 0
    groups: int = 0
    missing_ranks: list[int] = field(default_factory=list)
    problems: list[DumpError] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    """(file, what) for what was imported but cannot be vouched for."""
    files_written: list[Path] = field(default_factory=list)
    members: RankMembers = field(default_factory=dict)
    """Each rank's groups' members, for the files written without ``pg_ranks``
    (``import_dumps(members_in_files=False)``)."""
    rank_files: list[RankFile] = field(default_factory=list)
    """What each file of ``files_written`` holds, as ``check_files`` would read it from the
    footer: an analysis of what this import just wrote need not read those footers again."""
    twins_skipped: list[Path] = field(default_factory=list)
    """Same buffer in a second encoding (``rank_3`` and ``rank_3.json``): one kept, pickle first."""
    strict_aborted: bool = False
    memberships: dict[tuple[str, str], list[Membership]] = field(default_factory=dict)
    """(job, incident) -> its groups (one per replica where replicas share a group name)."""
    imported: list[IncidentImported] = field(default_factory=list)
    """Each incident written, in ``incidents`` order."""
    runs_split: bool = False
    """The input held dumps of several runs, imported as separate incidents."""
    swept: int = 0
    """Temporary files of earlier, killed imports removed."""
    scratch_tables: dict[Path, pa.Table] = field(default_factory=dict)
    """Each scratch file of ``files_written`` (``archive.scratch``), by path: its rows,
    mapped into memory by this process while the workers converted the other dumps, for
    ``scratch.rows``."""
    spans_files: int = 0
    """OTLP JSON lines files read: an import of spans, not of dumps (see the module)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def runs_described(self) -> list[str]:
        """One line per incident: its ranks, the ranks without a dump, its entries' times."""
        return [incident.describe() for incident in self.imported]

    def summary(self) -> str:
        """One line for a terminal or a log (and one more per incident when there are
        several: runs split, several jobs' or incidents' folders, torchft quorums)."""
        if self.strict_aborted:
            return (
                f"nothing written to {self.archive} (--strict): "
                f"{len(self.problems)} file(s) could not be imported"
            )
        if not self.files_written:
            why = (
                f"{len(self.problems)} input(s) could not be used"
                if self.problems
                else "no dump held an entry"
            )
            return f"imported nothing into {self.archive}: {why}"
        if self.spans_files:
            text = (
                f"imported {len(self.ranks)} ranks, {self.entries} entries from"
                f" {self.spans_files} OTLP JSON lines file(s) into {self.archive}"
                f" (job={self.job} incident={','.join(self.incidents)})"
            )
            if self.problems:
                text += f"; {len(self.problems)} file(s) failed"
            return text
        several = self.runs_split or len(self.imported) > 1
        if several:
            missing = "; ".join(
                f"{i.incident}: {describe_ranks(i.missing_ranks)}" for i in self.imported
            )
            ranks = f"{len(self.files_written)} rank dumps"
        else:
            missing = describe_ranks(self.missing_ranks)
            ranks = f"{len(self.ranks)} ranks"
        incidents = ",".join(self.incidents) or "-"
        text = (
            f"imported {ranks}, {self.entries} entries, {self.groups} groups"
            f" into {self.archive} (job={self.job} incident={incidents}); missing ranks: {missing}"
        )
        if self.problems:
            text += f"; {len(self.problems)} file(s) failed"
        if self.runs_split:
            text += (
                f"\nthe dumps are of {len(self.incidents)} runs (told apart by their times, FR"
                " and library versions and world size), imported as separate incidents:"
            )
        elif several:
            text += (
                f"\ntheir folders (job=J, incident=I, torchft quorums) hold"
                f" {len(self.incidents)} incidents:"
            )
        if several:
            text += "\n" + "\n".join(f"  {line}" for line in self.runs_described())
        return text


@dataclass(kw_only=True, slots=True)
class _Task:
    dump: DumpFile
    job: str
    incident: str
    final: Path
    owner: str | None = None
    """The import's lock token, carried by its temporary files' names."""
    base: str = ""
    """The incident before runs were told apart (with its quorum suffix: ``quorum``)."""
    members_in_file: bool = True
    """Write ``pg_ranks`` into the rank file (see ``import_dumps``)."""


@dataclass(kw_only=True, slots=True)
class _Outcome:
    task: _Task
    staged: Path | None = None
    error: DumpError | None = None
    rows: int = 0
    span: tuple[int, int, int] = (0, -1, -1)
    source_format: str = ""
    groups: dict[str, GroupSeen] = field(default_factory=dict)
    incomplete_membership: bool = False
    archive_error: ArchiveError | None = None
    warnings: list[str] = field(default_factory=list)
    time_span: tuple[int, int] | None = None
    """(first, last) ``time_created_ns`` of its entries."""
    fr_version: str | None = None
    comm_lib_version: str | None = None
    world: int | None = None
    """The default group's size, when the dump's group table can be trusted (not gloo)."""
    run_id: str | None = None
    """The launch's id, when the dump's path names it (``run=R/``, the recorder's)."""
    dump_time_ns: int = 0
    members: dict[str, list[int] | None] | None = None
    """Group name -> members as its file's rows have them once memberships were inferred,
    for a file written without ``pg_ranks`` (else: ``groups``)."""
    lifted: footer_members.Runs = field(default_factory=dict)
    """The groups whose members the file keeps in its footer (``archive.footer_members``)."""
    mapped: tuple[Path, pa.Table] | None = None
    """A scratch file's rows as the parent mapped them on receiving it, with the staged
    file they are of (a file staged again later is not that file)."""


def _load_and_stage(task: _Task) -> _Outcome:
    to_scratch = scratch.is_scratch(task.final)
    try:
        parsed = load_dump_file(
            task.dump,
            job=task.job,
            incident=task.incident,
            members_column=task.members_in_file,
            dictionary_members_above=None if to_scratch else footer_members.FOOTER_MIN_MEMBERS,
            shared=to_scratch,
        )
    except DumpError as exc:
        return _Outcome(task=task, error=exc)
    table = parsed.table
    lifted: footer_members.Runs = {}
    incomplete = needs_membership(parsed.groups)
    if "pg_ranks" in table.column_names:
        if incomplete:  # memberships are inferred into every row's list later
            table = footer_members.with_lists(table)
        else:
            table, lifted = footer_members.as_written(table)
    try:
        staged = write_staged(table, task.final, task.owner)
    except ArchiveError as exc:
        return _Outcome(task=task, archive_error=exc)
    world = next(
        (len(g.ranks) for g in parsed.groups.values() if g.desc == "default_pg" and g.ranks),
        None,
    )
    comm_lib = next((v for v in table.column("comm_lib_version").unique().to_pylist() if v), None)
    run_id = (
        next((v for v in table.column("run_id").unique().to_pylist() if v), None)
        if "run_id" in table.column_names
        else None
    )
    dump_time = table.column("dump_time_ns")[0].as_py() if table.num_rows else None
    if dump_time is None:
        with contextlib.suppress(OSError):
            dump_time = task.dump.path.stat().st_mtime_ns
    return _Outcome(
        task=task,
        staged=staged,
        rows=table.num_rows,
        span=parsed.record_id_span,
        source_format=parsed.source_format,
        groups=parsed.groups,
        incomplete_membership=incomplete,
        lifted=lifted,
        warnings=parsed.warnings,
        time_span=_time_span(table),
        fr_version=parsed.version,
        comm_lib_version=comm_lib,
        world=world,
        run_id=run_id,
        dump_time_ns=dump_time or 0,
    )


def _load_and_stage_batch(tasks: list[_Task]) -> list[_Outcome]:
    return [_load_and_stage(task) for task in tasks]


_BATCH_MAX = 16
"""Dumps a worker is handed at a time, at most (each task's outcome waits for its batch)."""


def _time_span(table: pa.Table) -> tuple[int, int] | None:
    times = table.column("time_created_ns")
    times = times.filter(pc.greater(times, pa.scalar(0, pa.int64())))
    if len(times) == 0:
        return None
    bounds = pc.min_max(times)
    return int(bounds["min"].as_py()), int(bounds["max"].as_py())


def default_incident(files: Iterable[DumpFile]) -> str:
    """A stable id for a dump set, so that importing it twice lands in the same place.

    Hashes each file's rank, size and the bytes at both ends (cheap, and unchanged by
    copying the files elsewhere).
    """
    digest = hashlib.sha256()
    for dump in sorted(files, key=lambda d: (d.rank if d.rank is not None else -1, str(d.path))):
        digest.update(f"{dump.rank}:".encode() + os.fsencode(dump.path.name) + b":")
        try:
            with dump.path.open("rb") as handle:
                size = handle.seek(0, 2)
                handle.seek(0)
                head = handle.read(4096)
                handle.seek(max(size - 65536, 0))
                tail = handle.read()
        except OSError:
            continue
        digest.update(f"{size}:".encode())
        digest.update(head)
        digest.update(tail)
    return f"import-{digest.hexdigest()[:12]}"


def _quorum_name(base: str, quorum: str | None) -> str:
    return base if quorum is None else f"{base}-quorum{quorum}"


def _dump_job(dump: DumpFile, job: str | None, default: str) -> str:
    """The job a dump is imported under: ``job`` (the caller's), else its ``job=J``
    folder's, else ``default`` (``config.job_name``)."""
    return job if job is not None else dump.job or default


def _plan(
    files: list[DumpFile],
    *,
    archive: Path,
    job: str | None,
    default_job: str,
    incident: str | None,
    owners: dict[str, str],
    members_in_files: bool,
    scratch_files: bool,
) -> list[_Task]:
    """One task per dump; ``owners``: each job's import lock token."""
    suffix = scratch.SUFFIX if scratch_files and len(files) <= scratch.MAX_FILES else ".parquet"
    by_group: dict[tuple[str, str, str], list[DumpFile]] = {}
    for dump in files:
        key = (_dump_job(dump, job, default_job), dump.incident or "", dump.quorum or "")
        by_group.setdefault(key, []).append(dump)
    tasks: list[_Task] = []
    for (job_name, _, _), group in sorted(by_group.items()):
        quorum = group[0].quorum
        base = incident if incident is not None else default_incident(group)
        name = _quorum_name(base, quorum)
        config.validate_partition_value("incident", name)
        for dump in group:
            rank = dump.rank if dump.rank is not None else -1
            tasks.append(
                _Task(
                    dump=dump,
                    job=job_name,
                    incident=name,
                    final=rank_file(archive, job_name, name, rank, suffix=suffix),
                    owner=owners[job_name],
                    base=name,
                    members_in_file=members_in_files,
                )
            )
    return tasks


# --- telling runs apart -------------------------------------------------------------------


@dataclass(kw_only=True)
class _Run:
    members: list[_Outcome]
    start: int
    end: int
    fr_version: str | None
    comm_lib_version: str | None = None
    world: int | None = None
    run_id: str | None = None

    @classmethod
    def of(cls, outcome: _Outcome, start: int, end: int) -> _Run:
        """A run of one dump so far, from ``start`` to ``end``."""
        run = cls(members=[], start=start, end=end, fr_version=outcome.fr_version)
        run.add(outcome)
        return run

    def accepts(self, outcome: _Outcome) -> bool:
        return (
            outcome.fr_version == self.fr_version
            and _agree(outcome.comm_lib_version, self.comm_lib_version)
            and _agree(outcome.world, self.world)
            and _agree(outcome.run_id, self.run_id)
        )

    def add(self, outcome: _Outcome) -> None:
        self.members.append(outcome)
        if outcome.time_span is not None:
            self.start = min(self.start, outcome.time_span[0])
            self.end = max(self.end, outcome.time_span[1])
        self.comm_lib_version = self.comm_lib_version or outcome.comm_lib_version
        self.world = self.world or outcome.world
        self.run_id = self.run_id or outcome.run_id


def _agree(a: object, b: object) -> bool:
    return a is None or b is None or a == b


def split_runs(outcomes: list[_Outcome]) -> list[list[_Outcome]]:
    """The runs among one incident's dumps, oldest first (see the module's docstring).

    Dumps are taken in the order of their first entry; each joins a run whose versions
    and world size it agrees with and whose entries reach to within ``RUN_GAP_NS`` of its
    first, else starts a run. Dumps without timed entries join the run nearest to their
    dump time that they agree with.
    """
    timed = sorted(
        (o for o in outcomes if o.time_span is not None),
        key=lambda o: (o.time_span, str(o.task.dump.path)),
    )
    runs: list[_Run] = []
    for outcome in timed:
        assert outcome.time_span is not None
        start, end = outcome.time_span
        home = next(
            (r for r in runs if r.accepts(outcome) and start <= r.end + RUN_GAP_NS),
            None,
        )
        if home is None:
            runs.append(_Run.of(outcome, start, end))
        else:
            home.add(outcome)
    for outcome in sorted(
        (o for o in outcomes if o.time_span is None), key=lambda o: str(o.task.dump.path)
    ):
        fitting = [r for r in runs if r.accepts(outcome)] or runs
        if not fitting:
            runs.append(_Run.of(outcome, outcome.dump_time_ns, outcome.dump_time_ns))
            continue
        when = outcome.dump_time_ns
        nearest = min(
            fitting,
            key=lambda r: (
                0 if r.start <= when <= r.end else min(abs(when - r.start), abs(when - r.end))
            ),
        )
        nearest.members.append(outcome)
    runs.sort(key=lambda r: (r.start, r.end))
    return [r.members for r in runs]


def _separate_runs(
    outcomes: list[_Outcome],
    incident: str | None,
    locks: dict[str, ImportLock],
    report: ImportReport,
) -> None:
    """Give each run among the dumps of one planned incident an incident of its own."""
    by_base: dict[tuple[str, str], list[_Outcome]] = {}
    for outcome in outcomes:
        if outcome.error is None:
            by_base.setdefault((outcome.task.job, outcome.task.base), []).append(outcome)
    for (job, base), members in sorted(by_base.items()):
        runs = split_runs(members)
        if len(runs) < 2:
            continue
        report.runs_split = True
        quorum = members[0].task.dump.quorum
        for number, run in enumerate(runs, start=1):
            if incident is not None:
                name = _quorum_name(f"{incident}-run{number}", quorum)
            else:
                name = _quorum_name(default_incident(o.task.dump for o in run), quorum)
            config.validate_partition_value("incident", name)
            locks[job].add([name])
            for outcome in run:
                _retarget(outcome, name)
        _remove_if_empty(partition_dir(members[0].task.final.parents[2], job, base))


def _retarget(outcome: _Outcome, incident: str) -> None:
    """Move a staged file to another incident (its rows name their incident)."""
    task = outcome.task
    if task.incident == incident:
        return
    archive = task.final.parents[2]
    rank = task.dump.rank if task.dump.rank is not None else -1
    task.incident = incident
    task.final = rank_file(archive, task.job, incident, rank, suffix=task.final.suffix)
    if outcome.staged is None:
        return
    table = read_staged(outcome.staged)
    column = table.schema.get_field_index("incident")
    table = table.set_column(
        column,
        table.schema.field(column),
        pa.array([incident] * table.num_rows, table.schema.field(column).type),
    )
    restaged = write_staged(table, task.final, task.owner)
    discard_staged(outcome.staged)
    outcome.staged = restaged


def _remove_if_empty(folder: Path) -> None:
    """A planned incident folder all of whose dumps went to runs' incidents."""
    with contextlib.suppress(OSError):
        folder.rmdir()


def _pool_context() -> multiprocessing.context.BaseContext:
    """fork where it is safe, forkserver where the caller runs other threads.

    fork starts workers in milliseconds and, unlike spawn/forkserver, does not re-import
    the caller's main script (which would break callers without a ``__main__`` guard).
    With other Python threads alive, a forked child could inherit a lock held by one of
    them, so then the clean forkserver is used instead.
    """
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("spawn")


_PR_SET_PDEATHSIG = 1
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_KEEP_HEAP = 32 << 20
"""Bytes: glibc's largest mmap threshold on 64-bit; a dump's buffers are smaller."""


def _worker_init(parent: int | None) -> None:
    """A worker leaves signals to its parent, and dies with it even when the parent is
    killed outright (Linux), instead of waiting forever for work. ``parent``: the
    parent's pid when forked from it (with forkserver, the server dies with the parent)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        # glibc: keep the heap between dumps. By default, freeing one dump's buffers
        # gave the top of the heap back to the system and the next dump faulted every
        # page in again: 210,000 page faults and 0.4 s of system time for 256 dumps
        libc.mallopt(_M_TRIM_THRESHOLD, _KEEP_HEAP)
        libc.mallopt(_M_MMAP_THRESHOLD, _KEEP_HEAP)
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # the parent died before the line above took effect
    # A worker holds one dump's tree of small containers at a time, freed by reference
    # counting when its task ends: the cyclic GC would only rescan that tree (and the
    # parent's heap a forked worker shares) and find nothing to collect. Off for the
    # worker's life: 256 dumps of 2,000 entries import with ~12% less CPU.
    gc.disable()


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Stop every worker now: running tasks too, not only queued ones."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.terminate()
    deadline = time.monotonic() + 5.0
    for process in processes:
        with contextlib.suppress(Exception):
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(1.0)


def _received(outcome: _Outcome, known: dict[tuple[int, ...], list[int]]) -> _Outcome:
    """An outcome as the parent keeps it.

    Each group's member list points at one list per distinct membership: every member of
    a group reports the same list, and a rank of an 8,192-rank job knows 9,222 member
    ranks (its groups and the default group): a copy for every rank took 2.7 GB here.

    A scratch file is mapped into memory now, while the workers convert the other dumps,
    for the analysis that reads it next (``ImportReport.scratch_tables``): opening 256
    files took 0.06-0.07 s of a 1.4 s ``fr-otel analyze DUMPS``. Where that fails, the
    analysis opens the file itself and says why.
    """
    for group in outcome.groups.values():
        if group.ranks:
            group.ranks = known.setdefault(tuple(group.ranks), group.ranks)
    if outcome.staged is not None and scratch.is_scratch(outcome.task.final):
        with contextlib.suppress(OSError, pa.ArrowException):
            outcome.mapped = (outcome.staged, scratch.mapped(outcome.staged))
    return outcome


def _run(
    tasks: list[_Task],
    workers: int,
    on_progress: ProgressCallback | None,
    meanwhile: Callable[[], object] | None,
) -> list[_Outcome]:
    outcomes: list[_Outcome] = []
    members: dict[tuple[int, ...], list[int]] = {}
    total = len(tasks)
    if workers <= 1 or total < _INLINE_MAX_FILES:
        if meanwhile is not None:
            meanwhile()
        for task in tasks:
            outcomes.append(_received(_load_and_stage(task), members))
            if on_progress:
                on_progress(len(outcomes), total)
        return outcomes
    context = _pool_context()
    pool = ProcessPoolExecutor(
        max_workers=min(workers, total),
        mp_context=context,
        initializer=_worker_init,
        initargs=(os.getpid() if context.get_start_method() == "fork" else None,),
    )
    # tasks go to the workers a few at a time: one round trip through the pool per dump
    # (pickle the task, wake the pool's thread, queue, pickle the outcome back) left each
    # worker idle between dumps, 0.5 s of 1.9 s at 256 dumps
    size = max(1, min(_BATCH_MAX, total // (workers * 8)))
    try:
        futures = [
            pool.submit(_load_and_stage_batch, tasks[i : i + size]) for i in range(0, total, size)
        ]
        if meanwhile is not None:
            # every worker has started (with fork, the first submission starts them all):
            # whatever this loads or starts is not forked into them
            meanwhile()
        done = as_completed(futures)
        # as_completed lets go of each future it yields: with no list of them here, each
        # result's own member lists are freed once shared
        del futures
        for future in done:
            for outcome in future.result():
                outcomes.append(_received(outcome, members))
            if on_progress:
                on_progress(len(outcomes), total)
    except BaseException:
        _stop_workers(pool)
        raise
    pool.shutdown(wait=True)
    return outcomes


def _pick_per_rank(
    outcomes: list[_Outcome], report: ImportReport
) -> tuple[dict[_RankKey, _Outcome], list[_Outcome]]:
    """One outcome per (job, incident, rank); the rest are twins or reported duplicates."""
    by_key: dict[_RankKey, list[_Outcome]] = {}
    for outcome in outcomes:
        if outcome.error is None:
            rank = outcome.task.dump.rank
            assert rank is not None  # unnamed dumps fail in load_dump_file
            by_key.setdefault((outcome.task.job, outcome.task.incident, rank), []).append(outcome)
    kept: dict[_RankKey, _Outcome] = {}
    dropped: list[_Outcome] = []
    for key, candidates in sorted(by_key.items()):
        # Pickle first (it has stack frames), then the newest buffer, then path order.
        candidates.sort(
            key=lambda o: (o.source_format != "pickle", -o.span[2], str(o.task.dump.path))
        )
        best = candidates[0]
        kept[key] = best
        for other in candidates[1:]:
            dropped.append(other)
            if other.span == best.span:
                report.twins_skipped.append(other.task.dump.path)
            else:
                report.problems.append(
                    DumpError(
                        other.task.dump.path,
                        "duplicate",
                        f"rank {key[2]} also has the dump {best.task.dump.path}, which holds a"
                        " newer buffer; this one was not imported",
                    )
                )
    return kept, dropped


def _fill_memberships(kept: dict[_RankKey, _Outcome], report: ImportReport) -> None:
    incidents = sorted({(job, incident) for job, incident, _ in kept})
    for job, incident in incidents:
        members = {rank: o for (j, inc, rank), o in kept.items() if (j, inc) == (job, incident)}
        memberships = resolve_memberships({rank: o.groups for rank, o in members.items()})
        report.memberships[(job, incident)] = memberships
        for outcome in members.values():
            if outcome.incomplete_membership and outcome.staged is not None:
                table = read_staged(outcome.staged)
                in_file = outcome.task.members_in_file
                if not in_file:
                    table = _with_members(table, {n: g.ranks for n, g in outcome.groups.items()})
                table = apply_memberships(table, memberships)
                if not in_file:
                    outcome.members = dict(
                        zip(
                            table.column("pg_name").to_pylist(),
                            table.column("pg_ranks").to_pylist(),
                            strict=True,
                        )
                    )
                    table = table.drop_columns(["pg_ranks"])
                restaged = write_staged(table, outcome.task.final, outcome.task.owner)
                discard_staged(outcome.staged)
                outcome.staged = restaged
        # a dump without entries is a rank whose buffer is missing
        empty = {rank for rank, outcome in members.items() if outcome.rows == 0}
        expected = expected_ranks(memberships) | empty
        report.missing_ranks.extend(sorted(expected - (set(members) - empty)))
        report.groups += len(memberships)


def _with_members(table: pa.Table, members: dict[str, list[int] | None]) -> pa.Table:
    """``table`` (written without ``pg_ranks``) with the column put back, by group name."""
    field_ = RECORD_SCHEMA.field("pg_ranks")
    column = pa.array([members.get(n) for n in table.column("pg_name").to_pylist()], field_.type)
    return table.add_column(RECORD_SCHEMA.get_field_index("pg_ranks"), field_, column)


def _write_manifest(archive: Path, job: str, incident: str, report: ImportReport) -> Manifest:
    """Record the incident's ranks and groups beside its files."""
    return refresh_manifest(
        archive,
        job,
        incident,
        (
            GroupMembers(name=m.name, desc=m.desc, ranks=m.ranks, inferred=m.inferred)
            for m in report.memberships.get((job, incident), [])
        ),
    )


def import_dumps(
    paths: list[str | Path],
    *,
    archive: str | Path | None = None,
    job: str | None = None,
    incident: str | None = None,
    strict: bool = False,
    workers: int | None = None,
    on_progress: ProgressCallback | None = None,
    members_in_files: bool = True,
    scratch_files: bool = False,
    meanwhile: Callable[[], object] | None = None,
) -> ImportReport:
    """Import Flight Recorder dumps (files, directories or globs) into an archive.

    Never raises for a bad dump file: each one is in ``report.problems`` and the others
    are imported (with ``strict``, nothing is written when any file fails); so is a
    folder without any dump. Dumps of different runs become separate incidents (see the
    module's docstring). OTLP JSON lines files among ``paths`` (named, or found in the
    folders and globs) are imported as spans instead, each keeping its own job and
    incident unless ``job`` / ``incident`` name one (not ``FR_OTEL_JOB``: spans say
    theirs). Raises ``ArchiveError`` when the archive itself cannot be written (nothing
    partial is left) and ``ConfigError`` for an unusable job or incident name, or for
    spans and dumps given together. Interrupted (``KeyboardInterrupt``), it stops its
    workers and leaves no temporary file. Without ``job``, a dump under a ``job=J`` folder
    is imported under ``J`` (see the module's docstring), others under ``FR_OTEL_JOB``'s.

    ``members_in_files=False`` leaves ``pg_ranks`` (each row's group members) out of the
    rank files and puts each rank's groups in ``report.members`` instead: for an archive
    that only ``open_source`` reads, which puts the column back. A default group's list
    is on every one of its rows: at 8,192 ranks it is two thirds of a rank file's write.
    ``scratch_files=True`` writes the rank files as Arrow IPC (``archive.scratch``), for
    such an archive too: faster to write, and read by nothing else (up to
    ``scratch.MAX_FILES`` dumps; past it, Parquet).

    ``meanwhile``: the caller's own work, done once in this thread while the workers
    convert the dumps (before the conversion where there are too few dumps for workers).
    """
    archive_path = config.archive_dir(archive)
    job_value = config.job_name(job)
    if incident is not None:
        config.validate_partition_value("incident", incident)
    report = ImportReport(archive=archive_path, job=job_value)
    discovery = discover(paths)
    for missing in discovery.missing:
        report.problems.append(
            DumpError(missing, "missing", "no such file, directory or matching glob")
        )
    for folder, holds in discovery.empty:
        report.problems.append(DumpError(folder, "missing", _no_dumps_detail(holds)))
    if discovery.spans:
        if discovery.files:
            raise ConfigError(
                "import OTLP JSON lines files (spans) separately from Flight Recorder dumps:"
                f" {_names(p.name for p in discovery.spans)} and"
                f" {_names(d.path.name for d in discovery.files)} were given or found together"
            )
        return _import_spans(
            discovery.spans,
            archive=archive_path,
            job=job,
            incident=incident,
            strict=strict,
            report=report,
        )
    if not discovery.files:
        report.problems.sort(key=lambda e: e.path)
        return report
    jobs = sorted({_dump_job(dump, job, job_value) for dump in discovery.files})
    report.job = ",".join(jobs)
    locks = {name: ImportLock(archive_path, name, ()) for name in jobs}
    tasks = _plan(
        discovery.files,
        archive=archive_path,
        job=job,
        default_job=job_value,
        incident=incident,
        owners={name: lock.token for name, lock in locks.items()},
        members_in_files=members_in_files,
        scratch_files=scratch_files,
    )
    for task in tasks:
        locks[task.job].add([task.incident])
    outcomes: list[_Outcome] = []
    interrupted = False
    with contextlib.ExitStack() as held:
        for lock in locks.values():
            held.enter_context(lock)
        report.swept = sum(len(sweep(archive_path, mine=lock)) for lock in locks.values())
        try:
            outcomes = _run(tasks, config.import_workers(workers), on_progress, meanwhile)
            _finish(outcomes, archive_path, incident, strict, locks, report)
            return report
        except BaseException:
            interrupted = True
            raise
        finally:
            for outcome in outcomes:
                if outcome.staged is not None:
                    discard_staged(outcome.staged)
            for name, lock in locks.items():
                if interrupted:
                    # what workers staged before they were stopped, whose names never came back
                    sweep(archive_path, mine=lock, also=((name, i) for i in lock.incidents))
                for incident_name in lock.incidents:
                    _remove_if_empty(partition_dir(archive_path, name, incident_name))


def _names(names: Iterable[str]) -> str:
    listed = sorted(names)
    return ", ".join(listed[:3]) + (f" and {len(listed) - 3} more" if len(listed) > 3 else "")


def _no_dumps_detail(holds: list[str]) -> str:
    what = (
        "it is empty"
        if not holds
        else "it holds " + ", ".join(holds[:3]) + (", ..." if len(holds) > 3 else "")
    )
    return (
        "no Flight Recorder dumps in this folder or below (a dump's file name ends in its"
        " rank: comm_lib_trace_rank_3, nccl_trace_rank_3.json, rank_3), nor OTLP JSON lines"
        f" files (*.jsonl); {what}"
    )


# --- spans: OTLP JSON lines ---------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class SpansRead:
    """What one OTLP JSON lines file gave: fr_otel's rows, and what is wrong with it."""

    table: pa.Table | None
    """The rows of its fr_otel spans (of its complete lines, when it is cut short)."""
    problem: DumpError | None
    skipped: int = 0
    """Spans that are not fr_otel's (other services' spans in a Collector's archive)."""


def _span_members_bound(size: int) -> int:
    """How many ranks the member runs of ``size`` bytes of spans may name in all: what
    their rows' ``pg_ranks`` (8 bytes a member) may hold under the bound dumps have."""
    return (EXPANSION_FACTOR * size + EXPANSION_FLOOR) // 8


def read_spans_file(path: Path) -> SpansRead:
    """fr_otel's rows from an OTLP JSON lines file; never raises for a bad file.

    Problems, named like a bad dump's: ``missing``; ``empty`` (no line, or no span);
    ``foreign`` (not OTLP JSON lines, OTLP of another signal, or only other tools'
    spans); ``corrupt`` (a line inside that is not OTLP JSON); ``truncated`` (the last
    line cut short, as a file still being written or copied half-way has it: the
    complete lines before it are still read).
    """
    from fr_otel.otel.otlp_import import ExpandingSpansError, SpanRows

    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return SpansRead(table=None, problem=DumpError(path, "missing", "no such file"))
    except OSError as exc:
        return SpansRead(
            table=None,
            problem=DumpError(path, "missing", f"cannot be read: {exc.strerror or exc}"),
        )
    complete = 0
    cut_at: int | None = None
    with handle:
        rows = SpanRows(max_members=_span_members_bound(os.fstat(handle.fileno()).st_size))
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
                if complete == 0 and not line.lstrip().startswith(b"{"):
                    return SpansRead(table=None, problem=_not_json_lines(path))
                if not line.endswith(b"\n"):  # the last line, without its end
                    cut_at = number
                    break
                return SpansRead(
                    table=None,
                    problem=DumpError(path, "corrupt", f"line {number} is not JSON: {exc}"),
                )
            if not isinstance(data, dict) or not {"resourceSpans", "resource_spans"} & set(data):
                held = ", ".join(sorted(data)[:3]) if isinstance(data, dict) else "no object"
                return SpansRead(
                    table=None,
                    problem=DumpError(
                        path,
                        "foreign",
                        f"line {number} is not OTLP trace data (it holds {held or 'nothing'},"
                        " not resourceSpans): only spans are imported",
                    ),
                )
            try:
                rows.add_json(data)
            except ExpandingSpansError as exc:
                return SpansRead(table=None, problem=DumpError(path, "hostile", str(exc)))
            except (ValueError, TypeError) as exc:  # not OTLP JSON, or not fr_otel's JSON text
                return SpansRead(
                    table=None,
                    problem=DumpError(path, "corrupt", f"line {number} is not OTLP JSON: {exc}"),
                )
            complete += 1
    if complete == 0 and cut_at is None:
        return SpansRead(table=None, problem=DumpError(path, "empty", "the file has no line"))
    imported = rows.result()
    table = imported.table
    if cut_at is not None:
        read = (
            f"the {table.num_rows} entries of the {complete} complete line(s) before it were read"
            if complete
            else "no complete line precedes it: nothing was read"
        )
        problem = DumpError(
            path,
            "truncated",
            f"line {cut_at}, the last, is cut short (a file still being written, or copied"
            f" before it was complete); {read}",
        )
    elif table.num_rows == 0 and imported.skipped:
        problem = DumpError(
            path,
            "foreign",
            f"none of its {imported.skipped} spans is fr_otel's (no fr_otel.rank and"
            " fr_otel.record_id attributes)",
        )
    elif table.num_rows == 0:
        problem = DumpError(path, "empty", f"its {complete} line(s) hold no span")
    else:
        problem = None
    return SpansRead(table=table, problem=problem, skipped=imported.skipped)


def _not_json_lines(path: Path) -> DumpError:
    return DumpError(
        path,
        "foreign",
        "not OTLP JSON lines (its first line is not a JSON object); the Collector's file"
        " exporter writes them with format: json and no compression",
    )


def _import_spans(
    files: list[Path],
    *,
    archive: Path,
    job: str | None,
    incident: str | None,
    strict: bool,
    report: ImportReport,
) -> ImportReport:
    """OTLP JSON lines files into ``archive``. Spans keep their own job and incident
    unless ``job`` / ``incident`` name one."""
    import pyarrow.compute as pc

    from fr_otel.archive.manifest import continuous_incidents, mark_snapshot, read_manifest
    from fr_otel.archive.rows import write_rows
    from fr_otel.otel.otlp_import import UNKNOWN, unique_entries

    report.spans_files = len(files)
    tables: list[pa.Table] = []
    for path in files:
        read = read_spans_file(path)
        if read.problem is not None:
            report.problems.append(read.problem)
        if read.table is not None and read.table.num_rows:
            tables.append(read.table)
    report.problems.sort(key=lambda e: e.path)
    if strict and report.problems:
        report.strict_aborted = True
        return report
    if not tables:
        return report
    table = footer_members.concat_rows(tables)
    # spans a continuous-mode job sent before any incident name none: together they are a
    # snapshot of the running job, and its manifest says so (see analysis.snapshots)
    table = table.append_column("_continuous", pc.equal(table["incident"], UNKNOWN))
    for column, value in (("job", job), ("incident", incident)):
        if value is not None:
            config.validate_partition_value(column, value)
            table = table.set_column(
                table.schema.get_field_index(column),
                column,
                pa.repeat(pa.scalar(value, pa.string()), len(table)),
            )
    table = unique_entries(table)
    streamed = continuous_incidents(table, "_continuous")
    table = table.drop_columns(["_continuous"])
    for column in ("job", "incident"):
        for value in pc.unique(table[column]).to_pylist():
            config.validate_partition_value(column, value)
    report.files_written = write_rows(table, archive)
    for job_name, incident_name in streamed:
        mark_snapshot(archive, job_name, incident_name)
    report.entries = table.num_rows
    report.ranks = sorted(pc.unique(table["rank"]).to_pylist())
    jobs = sorted(pc.unique(table["job"]).to_pylist())
    report.job = ",".join(jobs)
    pairs = (
        table.group_by(["job", "incident"])
        .aggregate([("time_created_ns", "min"), ("time_created_ns", "max")])
        .to_pylist()
    )
    pairs.sort(key=lambda p: (p["time_created_ns_min"] or 0, p["job"], p["incident"]))
    report.incidents = list(dict.fromkeys(p["incident"] for p in pairs))
    report.job_incidents = list(dict.fromkeys((p["job"], p["incident"]) for p in pairs))
    for pair in pairs:
        manifest = read_manifest(archive, pair["job"], pair["incident"])
        first, last = pair["time_created_ns_min"], pair["time_created_ns_max"]
        report.imported.append(
            IncidentImported(
                incident=pair["incident"]
                if len(jobs) == 1
                else f"{pair['job']}/{pair['incident']}",
                ranks=manifest.ranks if manifest else (),
                missing_ranks=manifest.missing_ranks if manifest else (),
                time_span=(first, last) if first is not None and last is not None else None,
            )
        )
    return report


def _finish(
    outcomes: list[_Outcome],
    archive_path: Path,
    incident: str | None,
    strict: bool,
    locks: dict[str, ImportLock],
    report: ImportReport,
) -> None:
    """Everything after the workers: runs, duplicates, membership, commit, manifests."""
    for outcome in outcomes:
        if outcome.archive_error is not None:
            raise outcome.archive_error
    report.problems.extend(o.error for o in outcomes if o.error is not None)
    _separate_runs(outcomes, incident, locks, report)
    kept, dropped = _pick_per_rank(outcomes, report)
    for outcome in dropped:
        if outcome.staged is not None:
            discard_staged(outcome.staged)
            outcome.staged = None
    _fill_memberships(kept, report)
    report.warnings.extend(
        (printable(o.task.dump.path), w) for o in kept.values() for w in o.warnings
    )
    report.warnings.sort()
    report.problems.sort(key=lambda e: e.path)
    if strict and report.problems:
        report.strict_aborted = True
        return
    for outcome in sorted(kept.values(), key=lambda o: str(o.task.final)):
        assert outcome.staged is not None
        if outcome.rows == 0:  # a buffer without entries: the rank stays missing
            discard_staged(outcome.staged)
            outcome.staged = None
            continue
        if outcome.mapped is not None and outcome.mapped[0] == outcome.staged:
            report.scratch_tables[outcome.task.final] = outcome.mapped[1]
        outcome.mapped = None
        commit_staged(outcome.staged, outcome.task.final)
        outcome.staged = None
        report.files_written.append(outcome.task.final)
        file = RankFile.at(
            outcome.task.final,
            rows=outcome.rows,
            time_span=outcome.time_span,
            columns=_WRITTEN_COLUMNS
            if outcome.task.members_in_file
            else _WRITTEN_COLUMNS - {"pg_ranks"},
            members=tuple(outcome.lifted.items()),
        )
        report.rank_files.append(file)
        if not outcome.task.members_in_file and file.rank is not None:
            report.members[(file.incident, file.rank)] = (
                outcome.members
                if outcome.members is not None
                else {name: group.ranks for name, group in outcome.groups.items()}
            )
        report.entries += outcome.rows
    report.ranks = sorted({rank for (_, _, rank), o in kept.items() if o.rows})
    report.job_incidents = sorted(
        {(job, name) for job, name, _ in kept},
        key=lambda pair: (_first_time(kept, pair), pair),
    )
    report.incidents = [name for _, name in report.job_incidents]
    jobs = sorted({job for job, _ in report.job_incidents})
    if jobs:
        report.job = ",".join(jobs)
    _record_files(report.rank_files)
    for job, name in report.job_incidents:
        manifest = _write_manifest(archive_path, job, name, report)
        spans = [
            o.time_span
            for (j, inc, _), o in kept.items()
            if (j, inc) == (job, name) and o.time_span
        ]
        report.imported.append(
            IncidentImported(
                incident=name if len(jobs) == 1 else f"{job}/{name}",
                ranks=manifest.ranks,
                missing_ranks=manifest.missing_ranks,
                time_span=(min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None,
            )
        )


def _record_files(files: list[RankFile]) -> None:
    """Note what the rank files just written hold in their incident's file index, so that
    reading them again need not open every footer (``archive.file_index``)."""
    by_folder: dict[Path, list[RankFile]] = {}
    for file in files:
        if not scratch.is_scratch(file.path):  # the analysis's own, gone after it
            by_folder.setdefault(file.path.parent, []).append(file)
    for folder, written in by_folder.items():
        entries = [entry for entry in map(index_facts, written) if entry is not None]
        with exclusive(folder):
            write_index(folder, entries)


def _first_time(kept: dict[_RankKey, _Outcome], incident: tuple[str, str]) -> int:
    """The first entry time of ``incident``, a (job, incident) pair."""
    return min(
        (o.time_span[0] for (j, i, _), o in kept.items() if (j, i) == incident and o.time_span),
        default=0,
    )
