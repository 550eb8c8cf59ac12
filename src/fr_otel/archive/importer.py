"""Import a set of dump files into an archive, in parallel, losing nothing good.

Each worker process reads one dump (restricted unpickler), converts it and writes its
Parquet file under a temporary name. The parent then does what needs the whole fleet
(duplicate ranks, group membership for gloo dumps, missing ranks) and renames the files
into place, or, with ``strict``, discards them all when any file had a problem.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from fr_otel import config
from fr_otel.archive.layout import commit_staged, discard_staged, rank_file, write_staged
from fr_otel.archive.manifest import GroupMembers, refresh_manifest
from fr_otel.dumps.discover import DumpFile, discover
from fr_otel.dumps.load import load_dump_file
from fr_otel.dumps.membership import (
    Membership,
    apply_memberships,
    expected_ranks,
    needs_membership,
    resolve_memberships,
)
from fr_otel.dumps.parse import GroupSeen
from fr_otel.errors import ArchiveError, DumpError
from fr_otel.pathnames import printable

ProgressCallback = Callable[[int, int], None]
"""Called with (files done, files total) as the import goes."""

_INLINE_MAX_FILES = 4
"""Below this many files a worker pool costs more than it saves."""


@dataclass(kw_only=True)
class ImportReport:
    """What an import did. ``problems`` lists every file that could not be imported."""

    archive: Path
    job: str
    incidents: list[str] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    entries: int = 0
    groups: int = 0
    missing_ranks: list[int] = field(default_factory=list)
    problems: list[DumpError] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    """(file, what) for what was imported but cannot be vouched for."""
    files_written: list[Path] = field(default_factory=list)
    twins_skipped: list[Path] = field(default_factory=list)
    """Same buffer in a second encoding (``rank_3`` and ``rank_3.json``): one kept, pickle first."""
    strict_aborted: bool = False
    memberships: dict[str, dict[str, Membership]] = field(default_factory=dict)
    """incident -> group name -> membership."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line for a terminal or a log."""
        if self.strict_aborted:
            return (
                f"nothing written to {self.archive} (--strict): "
                f"{len(self.problems)} file(s) could not be imported"
            )
        missing = ",".join(map(str, self.missing_ranks)) if self.missing_ranks else "none"
        incidents = ",".join(self.incidents) or "-"
        text = (
            f"imported {len(self.ranks)} ranks, {self.entries} entries, {self.groups} groups"
            f" into {self.archive} (job={self.job} incident={incidents}); missing ranks: {missing}"
        )
        if self.problems:
            text += f"; {len(self.problems)} file(s) failed"
        return text


@dataclass(kw_only=True, slots=True)
class _Task:
    dump: DumpFile
    job: str
    incident: str
    final: Path


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


def _load_and_stage(task: _Task) -> _Outcome:
    try:
        parsed = load_dump_file(task.dump, job=task.job, incident=task.incident)
    except DumpError as exc:
        return _Outcome(task=task, error=exc)
    try:
        staged = write_staged(parsed.table, task.final)
    except ArchiveError as exc:
        return _Outcome(task=task, archive_error=exc)
    return _Outcome(
        task=task,
        staged=staged,
        rows=parsed.table.num_rows,
        span=parsed.record_id_span,
        source_format=parsed.source_format,
        groups=parsed.groups,
        incomplete_membership=needs_membership(parsed.table),
        warnings=parsed.warnings,
    )


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


def _plan(files: list[DumpFile], *, archive: Path, job: str, incident: str | None) -> list[_Task]:
    by_quorum: dict[str | None, list[DumpFile]] = {}
    for dump in files:
        by_quorum.setdefault(dump.quorum, []).append(dump)
    tasks: list[_Task] = []
    for quorum, group in sorted(by_quorum.items(), key=lambda kv: kv[0] or ""):
        base = incident if incident is not None else default_incident(group)
        name = base if quorum is None else f"{base}-quorum{quorum}"
        config.validate_partition_value("incident", name)
        for dump in group:
            rank = dump.rank if dump.rank is not None else -1
            tasks.append(
                _Task(dump=dump, job=job, incident=name, final=rank_file(archive, job, name, rank))
            )
    return tasks


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


def _run(tasks: list[_Task], workers: int, on_progress: ProgressCallback | None) -> list[_Outcome]:
    outcomes: list[_Outcome] = []
    total = len(tasks)
    if workers <= 1 or total < _INLINE_MAX_FILES:
        for task in tasks:
            outcomes.append(_load_and_stage(task))
            if on_progress:
                on_progress(len(outcomes), total)
        return outcomes
    with ProcessPoolExecutor(max_workers=min(workers, total), mp_context=_pool_context()) as pool:
        futures = [pool.submit(_load_and_stage, task) for task in tasks]
        for future in as_completed(futures):
            outcomes.append(future.result())
            if on_progress:
                on_progress(len(outcomes), total)
    return outcomes


def _pick_per_rank(
    outcomes: list[_Outcome], report: ImportReport
) -> tuple[dict[tuple[str, int], _Outcome], list[_Outcome]]:
    """One outcome per (incident, rank); the rest are twins or reported duplicates."""
    by_key: dict[tuple[str, int], list[_Outcome]] = {}
    for outcome in outcomes:
        if outcome.error is None:
            rank = outcome.task.dump.rank
            assert rank is not None  # unnamed dumps fail in load_dump_file
            by_key.setdefault((outcome.task.incident, rank), []).append(outcome)
    kept: dict[tuple[str, int], _Outcome] = {}
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
                        f"rank {key[1]} also has the dump {best.task.dump.path}, which holds a"
                        " newer buffer; this one was not imported",
                    )
                )
    return kept, dropped


def _fill_memberships(kept: dict[tuple[str, int], _Outcome], report: ImportReport) -> None:
    incidents = sorted({incident for incident, _ in kept})
    for incident in incidents:
        members = {rank: o for (inc, rank), o in kept.items() if inc == incident}
        memberships = resolve_memberships({rank: o.groups for rank, o in members.items()})
        report.memberships[incident] = memberships
        for outcome in members.values():
            if outcome.incomplete_membership and outcome.staged is not None:
                table = apply_memberships(pq.read_table(outcome.staged), memberships)
                restaged = write_staged(table, outcome.task.final)
                discard_staged(outcome.staged)
                outcome.staged = restaged
        # a dump without entries is a rank whose buffer is missing
        empty = {rank for rank, outcome in members.items() if outcome.rows == 0}
        expected = expected_ranks(memberships.values()) | empty
        report.missing_ranks.extend(sorted(expected - (set(members) - empty)))
        report.groups += len(memberships)


def _write_manifest(archive: Path, job: str, incident: str, report: ImportReport) -> None:
    """Record the incident's ranks and groups beside its files."""
    refresh_manifest(
        archive,
        job,
        incident,
        (
            GroupMembers(name=m.name, desc=m.desc, ranks=m.ranks, inferred=m.inferred)
            for m in report.memberships.get(incident, {}).values()
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
) -> ImportReport:
    """Import Flight Recorder dumps (files, directories or globs) into an archive.

    Never raises for a bad dump file: each one is in ``report.problems`` and the others
    are imported (with ``strict``, nothing is written when any file fails). Raises
    ``ArchiveError`` when the archive itself cannot be written (nothing partial is left)
    and ``ConfigError`` for an unusable job or incident name.
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
    tasks = _plan(discovery.files, archive=archive_path, job=job_value, incident=incident)
    outcomes: list[_Outcome] = []
    try:
        outcomes = _run(tasks, config.import_workers(workers), on_progress)
        for outcome in outcomes:
            if outcome.archive_error is not None:
                raise outcome.archive_error
        report.problems.extend(o.error for o in outcomes if o.error is not None)
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
            return report
        for outcome in sorted(kept.values(), key=lambda o: str(o.task.final)):
            assert outcome.staged is not None
            if outcome.rows == 0:  # a buffer without entries: the rank stays missing
                discard_staged(outcome.staged)
                outcome.staged = None
                continue
            commit_staged(outcome.staged, outcome.task.final)
            outcome.staged = None
            report.files_written.append(outcome.task.final)
            report.entries += outcome.rows
        report.ranks = sorted({rank for (_, rank), o in kept.items() if o.rows})
        report.incidents = sorted({incident for incident, _ in kept})
        for incident in report.incidents:
            _write_manifest(archive_path, job_value, incident, report)
        return report
    finally:
        for outcome in outcomes:
            if outcome.staged is not None:
                discard_staged(outcome.staged)
