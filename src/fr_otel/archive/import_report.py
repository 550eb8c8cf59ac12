"""What an import did: the report ``import_dumps`` returns, and each incident it wrote."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from fr_otel.archive.checks import RankFile
from fr_otel.archive.manifest import describe_ranks, describe_span
from fr_otel.dumps.membership import Membership
from fr_otel.errors import DumpError

RankMembers = dict[tuple[str, int], dict[str, list[int] | None]]
"""(incident, rank) -> group name -> the group's members (``ImportReport.members``)."""


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
    """OTLP JSON lines files read: an import of spans, not of dumps (see ``archive.importer``)."""

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
