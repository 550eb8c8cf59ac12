"""An archive's incidents as an agent asks for them: listed, named exactly, analysed.

A job or incident an agent names is compared with the names of the archive's incident
folders before any path is made of it, so a name that is not one of them (``..``, a
separator, another archive's) is refused like any unknown name. The analysis's JSON is
``fr-otel analyze --format json``'s own (``report.live_shown.render_json``, with the live
check's record that names the incident), so an agent and a person read the same verdict.
"""

from __future__ import annotations

import io
import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fr_otel.archive.incidents import (
    IncidentFolder,
    being_written,
    incident_folders,
    summarize_incidents,
)
from fr_otel.archive.manifest import describe_span
from fr_otel.errors import ArchiveError

if TYPE_CHECKING:
    from fr_otel.analysis import Analysis

KEPT_ANALYSES = 8
"""Analyses kept for the next question about the same incident (``explain`` after
``analyze``): an analysis is the slow part of both."""


def known_incident(archive: Path, job: str, incident: str) -> IncidentFolder:
    """The incident folder of ``job`` and ``incident``, named exactly; ``ArchiveError``
    naming what the archive holds when there is none, or when an import writes it now."""
    folders = incident_folders(archive)
    for folder in folders:
        if folder.job == job and folder.incident == incident:
            if folder.writer is not None:
                raise being_written(folder)
            return folder
    if not any(f.job == job for f in folders):
        jobs = ", ".join(sorted({f.job for f in folders})) or "none"
        raise ArchiveError(f"the archive has no job {job!r}; its jobs: {jobs}")
    incidents = ", ".join(sorted(f.incident for f in folders if f.job == job))
    raise ArchiveError(
        f"job {job!r} has no incident {incident!r}; its incidents: {incidents}"
        " (list_incidents describes each)"
    )


def listed_incidents(archive: Path, job: str | None = None) -> dict[str, Any]:
    """What ``fr-otel incidents`` says, as JSON: each incident's ranks and missing ranks,
    entries, time span, unreadable files, the import writing it now, and the lines of the
    live check's records that name it; then the records that name no incident here."""
    from fr_otel.report.live_shown import live_records, naming

    if job is not None and not any(f.job == job for f in incident_folders(archive)):
        raise ArchiveError(f"the archive has no job {job!r}")
    summaries = summarize_incidents(archive, job)
    live, _ = live_records(archive, job)  # an unreadable record is left out, as the CLI does
    incidents = []
    for summary in summaries:
        incidents.append(
            {
                "job": summary.job,
                "incident": summary.incident,
                "ranks": summary.ranks,
                "missing_ranks": summary.missing_ranks,
                "entries": summary.entries,
                "time_span_ns": list(summary.time_span) if summary.time_span else None,
                "time_span": describe_span(summary.time_span) if summary.time_span else None,
                "unreadable_files": [str(problem) for problem in summary.problems],
                "being_written_by": summary.writer.describe() if summary.writer else None,
                "live_check": [n.line for n in naming(live, summary.job, summary.incident)],
            }
        )
    here = {(s.job, s.incident) for s in summaries}
    unnamed = [
        {"job": s.job, "incident": s.incident, "line": s.line, "record": str(s.record.path)}
        for s in live
        if (s.job, s.incident) not in here
    ]
    return {"incidents": incidents, "live_records_naming_no_incident_here": unnamed}


def analysis_json(archive: Path, analysis: Analysis) -> dict[str, Any]:
    """``fr-otel analyze ARCHIVE --job J --incident I --format json``'s document."""
    from fr_otel.report.live_shown import live_records, naming, render_json

    live, _ = live_records(archive, analysis.job)
    named = naming(live, analysis.job, analysis.incident)
    out = io.StringIO()
    render_json(analysis, out, live=named[0] if named else None)
    document: dict[str, Any] = json.loads(out.getvalue())
    return document


class Analyses:
    """The analyses of an archive's incidents, each made once while its files stay as
    they were (the folder's newest file time and its file count), the last
    ``KEPT_ANALYSES`` kept. Safe to call from several threads."""

    def __init__(self, archive: Path, *, memory_limit: str | None = None) -> None:
        self._archive = archive
        self._memory_limit = memory_limit
        self._kept: OrderedDict[tuple[str, str, int, int], Analysis] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, job: str, incident: str) -> Analysis:
        """The analysis of ``job``/``incident``, which must be one of the archive's."""
        from fr_otel.analysis import analyze
        from fr_otel.analysis.source import reading_damaged_files

        folder = known_incident(self._archive, job, incident)
        key = (folder.job, folder.incident, folder.written_ns, folder.files)
        with self._lock:
            if key in self._kept:
                self._kept.move_to_end(key)
                return self._kept[key]
        analysis = reading_damaged_files(
            lambda: analyze(
                self._archive,
                job=folder.job,
                incident=folder.incident,
                memory_limit=self._memory_limit,
            )
        )
        with self._lock:
            self._kept[key] = analysis
            while len(self._kept) > KEPT_ANALYSES:
                self._kept.popitem(last=False)
        return analysis
