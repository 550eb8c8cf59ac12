"""A candidate confirmed or cleared by the analyzer itself, on a snapshot of the rings.

The pre-check only says that members differ; which differences are legal (scatter and
gather lists on the root alone, uneven all_to_all splits, object collectives), who is at
fault and what kind of fault it is, is the analyzer's judgement (``analysis.rules``,
``sql/04_rules.sql``, the divergence classes). So the rings of the run are imported as
they stand into a temporary archive (``ring_import.import_rings``, which marks the rings
of ranks still running as a snapshot: each group is read up to the last collective every
member issued) and analysed there: the live verdict is what ``fr-otel analyze`` says of
the same rings, and of the incident the ranks then flush.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from fr_otel.analysis.findings import Analysis, Finding
from fr_otel.analysis.kinds import DESYNC_KINDS
from fr_otel.config import RecorderSettings
from fr_otel.live.compare import Candidate
from fr_otel.recorder.ring import run_ring_dir


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    """The analyzer's word on the run's rings as they stood."""

    analyses: list[Analysis]
    """One per run the rings hold (this run's alone, normally)."""
    running: list[int]
    """Ranks whose owner still ran when their ring was read."""
    seconds: float
    """What the import and the analysis took."""

    def desync_at(self, candidate: Candidate) -> Finding | None:
        for analysis in self.analyses:
            found = desync_at(analysis, candidate)
            if found is not None:
                return found
        return None


def analyse_rings(settings: RecorderSettings) -> Snapshot:
    """Analyse this run's rings as they stand (a snapshot while ranks run)."""
    from fr_otel.analysis import analyze
    from fr_otel.recorder.ring_import import import_rings

    began = time.monotonic()
    folder = run_ring_dir(settings.rings, settings.job, settings.run_id)
    running: list[int] = []
    analyses = []
    # in memory where there is one: the archive is read once, then thrown away
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(
        prefix="fr-otel-live-", dir=shm if shm.is_dir() else None
    ) as scratch:
        imported = import_rings([folder], Path(scratch), settings.job, None)
        for incident in imported.incidents:
            running += imported.running.get(incident, [])
            analyses.append(analyze(scratch, job=settings.job, incident=incident))
    return Snapshot(analyses=analyses, running=sorted(running), seconds=time.monotonic() - began)


def desync_at(analysis: Analysis, candidate: Candidate) -> Finding | None:
    """The analysis's desync finding with a culprit at the candidate's slot; else its root
    cause, if that is a desync of the candidate's group (a reordering is named at the
    first slot it explains)."""
    desyncs = [
        finding
        for finding in analysis.findings
        if finding.kind in DESYNC_KINDS
        and finding.culprit_ranks
        and _same_group(finding, candidate)
    ]
    root = analysis.findings[analysis.root_cause] if analysis.root_cause is not None else None
    at_slot = [f for f in desyncs if f.collective_seq_id == candidate.seq]
    if root is not None and root in at_slot:
        return root
    if at_slot:
        return at_slot[0]
    return root if root is not None and root in desyncs else None


def _same_group(finding: Finding, candidate: Candidate) -> bool:
    """One name can stand for several groups (a mesh's tp groups): their members tell."""
    ranks = finding.group.ranks
    if finding.group.name != candidate.group:
        return False
    return ranks is None or candidate.members is None or tuple(ranks) == candidate.members
