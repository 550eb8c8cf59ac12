"""Which incidents an archive holds: finding them, choosing one, and describing each from
its files' footers and its manifest (no rows are read)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from fr_otel.archive.checks import check_files
from fr_otel.archive.layout import Writer, writers
from fr_otel.archive.manifest import read_manifest
from fr_otel.errors import ArchiveError, DumpError, IncidentChoiceError


@dataclass(frozen=True, kw_only=True, slots=True)
class Incident:
    """One (job, incident) of an archive."""

    job: str
    incident: str


def is_archive(path: Path) -> bool:
    """An archive holds ``job=<job>/incident=<incident>/`` folders (the Parquet files may
    be damaged, or still being written)."""
    return path.is_dir() and any(path.glob("job=*/incident=*"))


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
