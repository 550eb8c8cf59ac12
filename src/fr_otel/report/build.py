"""One incident in, its analysis and grid out."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fr_otel.analysis import Analysis, open_session
from fr_otel.report.defaults import DEFAULT_COLUMNS, DEFAULT_MAX_RANKS
from fr_otel.report.grid import Grid, build_grid
from fr_otel.report.lateness import LatenessStrip, lateness_strip, wants_strip


@dataclass(kw_only=True)
class IncidentReport:
    analysis: Analysis
    grid: Grid
    lateness: LatenessStrip | None = None
    """Per-rank lateness, for slow jobs and snapshots (``report.lateness``)."""


def build_report(
    path: str | Path,
    *,
    job: str | None = None,
    incident: str | None = None,
    columns: int = DEFAULT_COLUMNS,
    max_ranks: int = DEFAULT_MAX_RANKS,
    trace_ids: bool = False,
    span_ids: bool = False,
) -> IncidentReport:
    """Analyse ``path`` (an archive or dumps, as ``analyze`` takes) and lay out its grid."""
    with open_session(path, job=job, incident=incident) as session:
        grid = build_grid(
            session, columns=columns, max_ranks=max_ranks, trace_ids=trace_ids, span_ids=span_ids
        )
        analysis = session.analysis
        strip = lateness_strip(session) if wants_strip(analysis) else None
    return IncidentReport(analysis=analysis, grid=grid, lateness=strip)
