"""Import a set of dump files into an archive, in parallel, losing nothing good.

Each worker process reads one dump (restricted unpickler), converts it and writes its
Parquet file under a temporary name. The parent then does what needs the whole fleet
(telling runs apart, duplicate ranks, group membership for gloo dumps, missing ranks) and
renames the files into place, or, with ``strict``, discards them all when any file had a
problem.

**Runs are never mixed**: dumps of separate runs of a job (a job restarted, two runs'
dumps copied into one folder) are imported as separate incidents, ``<incident>-run1``,
``-run2``... oldest first (how runs are told apart: ``archive.runs``).

**Jobs.** A dump under a ``job=J`` folder (the recorder saves torch's own dumps as
``_fr_dumps/job=J/run=R/incident=I/``) is imported under job ``J`` unless the caller names
a job: trace ids derive from the job, so another job name gives other traces than the
recorder's. One import may so write several jobs' incidents, each under its own import
lock (a lock names one job). Dumps of different ``incident=I`` folders are never one
incident; their incident ids are derived from the dumps like any other's, not taken from
the folder, whose incident in the same archive holds the recorder's own rows.

**Spans.** OTLP JSON lines files (``fr-otel export --otlp-json``, the Collector's file
exporter), named or found in folders, are read back into rows instead
(``archive.spans_file``, ``archive.spans_import``): each span carries its job, incident and
rank, a span delivered twice (a Collector delivers at least once) is imported once, and a
file that is not such spans, or is cut short, is named with its problem like a bad dump.
Spans and dumps are imported separately: they name their incidents differently.

**Interruptions.** While it writes, an import holds a lock in ``ARCHIVE/.imports`` that
readers see (``layout.writers``). ``SIGTERM`` or ``SIGINT`` (``KeyboardInterrupt``, or
``errors.Terminated``) stops the workers and removes every temporary file; workers die
with the parent even when it is killed outright, and the next import sweeps what a
killed one left (``layout.sweep``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from pathlib import Path

from fr_otel import config
from fr_otel.archive import scratch
from fr_otel.archive.checks import RankFile, index_facts
from fr_otel.archive.duplicate_ranks import RankKey, pick_per_rank
from fr_otel.archive.file_index import write_index
from fr_otel.archive.hosts import HostMap
from fr_otel.archive.import_plan import dump_job, plan_tasks
from fr_otel.archive.import_report import ImportReport, IncidentImported, RankMembers
from fr_otel.archive.layout import ImportLock, commit_staged, discard_staged, partition_dir, sweep
from fr_otel.archive.manifest import GroupMembers, Manifest, exclusive, refresh_manifest
from fr_otel.archive.memberships import fill_memberships
from fr_otel.archive.runs import remove_if_empty, separate_runs
from fr_otel.archive.spans_import import import_spans
from fr_otel.archive.stage_dump import Outcome
from fr_otel.archive.workers import ProgressCallback, run_tasks
from fr_otel.dumps.discover import discover
from fr_otel.errors import ConfigError, DumpError
from fr_otel.pathnames import printable
from fr_otel.schema import RECORD_SCHEMA

__all__ = ["ImportReport", "ProgressCallback", "RankMembers", "import_dumps"]
"""The public entry point and the types of its signature and report (``RankMembers``: the
analysis's, for ``ImportReport.members``)."""

_WRITTEN_COLUMNS = frozenset(RECORD_SCHEMA.names)
"""A dump's table has the canonical columns (``dump_to_table``), and so has its file."""


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
    hosts: HostMap | None = None,
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
    is on every one of its rows: at thousands of ranks it is most of a rank file's write.
    ``scratch_files=True`` writes the rank files as Arrow IPC (``archive.scratch``), for
    such an archive too: faster to write, and read by nothing else (up to
    ``scratch.MAX_FILES`` dumps; past it, Parquet).

    ``hosts``: where each rank ran (``archive.hosts.read_host_map``), for dumps whose
    names do not say (a name's host is taken otherwise, ``archive.hosts``).

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
        return import_spans(
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
    jobs = sorted({dump_job(dump, job, job_value) for dump in discovery.files})
    report.job = ",".join(jobs)
    locks = {name: ImportLock(archive_path, name, ()) for name in jobs}
    tasks = plan_tasks(
        discovery.files,
        archive=archive_path,
        job=job,
        default_job=job_value,
        incident=incident,
        owners={name: lock.token for name, lock in locks.items()},
        members_in_files=members_in_files,
        scratch_files=scratch_files,
        hosts=hosts,
    )
    for task in tasks:
        locks[task.job].add([task.incident])
    outcomes: list[Outcome] = []
    interrupted = False
    with contextlib.ExitStack() as held:
        for lock in locks.values():
            held.enter_context(lock)
        report.swept = sum(len(sweep(archive_path, mine=lock)) for lock in locks.values())
        try:
            outcomes = run_tasks(tasks, config.import_workers(workers), on_progress, meanwhile)
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
                    remove_if_empty(partition_dir(archive_path, name, incident_name))


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


def _finish(
    outcomes: list[Outcome],
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
    separate_runs(outcomes, incident, locks, report)
    kept, dropped = pick_per_rank(outcomes, report)
    for outcome in dropped:
        if outcome.staged is not None:
            discard_staged(outcome.staged)
            outcome.staged = None
    fill_memberships(kept, report)
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


def _first_time(kept: dict[RankKey, Outcome], incident: tuple[str, str]) -> int:
    """The first entry time of ``incident``, a (job, incident) pair."""
    return min(
        (o.time_span[0] for (j, i, _), o in kept.items() if (j, i) == incident and o.time_span),
        default=0,
    )
