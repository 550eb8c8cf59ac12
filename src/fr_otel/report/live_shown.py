"""The live check's records (``ARCHIVE/_live``) as ``fr-otel incidents``, ``analyze`` and
the MCP tools show them: each in the words ``fr-otel run`` said it on stderr, and, beside
an incident's analysis, whether the analysis names the same culprit at the same
collective; and ``analyze``'s JSON document, which carries that join (``render_json``).

The join is made here, on the analysis the engine returned: the analysis knows nothing of
the live check, which is a record on disk beside the incident's rank files.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from fr_otel.analysis import Analysis
    from fr_otel.live.records import StoredRecord, UnreadableRecord

STALL = "stall"
"""A stall suspect's kind (``live.suspect.KIND``): not an analyzer finding kind."""


@dataclass(frozen=True, kw_only=True)
class Shown:
    """A record that can be shown: the record and its stderr line (without ``live: ``)."""

    record: StoredRecord
    line: str

    @property
    def job(self) -> str | None:
        return self.record.job

    @property
    def incident(self) -> str | None:
        return self.record.incident

    @property
    def is_stall(self) -> bool:
        return self.record.fields.get("kind") == STALL


def live_records(
    archive: Path, job: str | None = None
) -> tuple[list[Shown], list[UnreadableRecord]]:
    """The records under ``archive`` (of ``job``), oldest first, and each file that is not
    a record the live check wrote (left out, never fatal: the caller names them)."""
    from fr_otel.live.records import UnreadableRecord, read_records

    records, bad = read_records(archive, job)
    shown = []
    for record in records:
        try:
            shown.append(Shown(record=record, line=_line(record.fields)))
        except (TypeError, ValueError, AttributeError) as exc:
            bad.append(UnreadableRecord(path=record.path, problem=f"not as documented: {exc}"))
    return shown, bad


def _line(fields: dict[str, Any]) -> str:
    """The record's line as the agent said it: the same dataclass, rebuilt from its JSON."""
    from fr_otel.live.suspect import StallSuspect
    from fr_otel.live.verdict import Verdict

    kind = StallSuspect if fields.get("kind") == STALL else Verdict
    declared = dataclasses.fields(kind)
    missing = [
        field.name
        for field in declared
        if field.name not in fields
        and field.default is dataclasses.MISSING
        and field.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    names = {field.name for field in declared}
    line = kind(**{k: v for k, v in fields.items() if k in names}).line()
    return line.removeprefix("live: ")


def naming(shown: list[Shown], job: str, incident: str) -> list[Shown]:
    """The records that name ``incident`` of ``job``: a desync's verdict before a stall's
    suspect (the verdict is the finding; the stall only a suspect), then oldest first."""
    named = [s for s in shown if s.job == job and s.incident == incident]
    return sorted(named, key=lambda s: s.is_stall)  # stable: oldest first within each


def agrees(shown: Shown, analysis: Analysis) -> bool:
    """Whether the analysis's root cause names what the record names: the kind (a stall is
    no finding kind, so not for a stall), the culprit ranks, the group and the sequence."""
    if analysis.root_cause is None:
        return False
    root = analysis.findings[analysis.root_cause]
    fields = shown.record.fields
    same_kind = shown.is_stall or root.kind == fields.get("kind")
    return (
        same_kind
        and sorted(root.culprit_ranks) == sorted(fields.get("culprit_ranks") or [])
        and root.group.name == fields.get("group")
        and root.collective_seq_id == fields.get("seq")
    )


def named_words(shown: Shown) -> str:
    """'the live check named this while the job ran: <its line> (record: <path>)'."""
    return (
        f"the live check named this while the job ran: {shown.line} (record: {shown.record.path})"
    )


def agreement_words(shown: Shown, analysis: Analysis) -> str:
    """Whether the analysis of the flushed incident says the same, and if not what it says."""
    if agrees(shown, analysis):
        what = "the same culprit at the same collective"
        return f"the analysis of the flushed incident agrees: {what}"
    if analysis.root_cause is None:
        instead = "no problem" if analysis.healthy else "no root cause (slow, not stuck)"
        return f"the analysis of the flushed incident finds {instead} instead"
    from fr_otel.analysis.findings import ranks_words

    root = analysis.findings[analysis.root_cause]
    who = ranks_words(sorted(root.culprit_ranks)) if root.culprit_ranks else "no culprit"
    return (
        f"the analysis of the flushed incident names {root.kind}: {who} in"
        f" {root.group.label()} collective #{root.collective_seq_id} instead"
    )


def as_json(shown: Shown | None, analysis: Analysis) -> dict[str, Any] | None:
    """``analyze``'s JSON ``live``: the record's fields, its path and ``agrees``."""
    if shown is None:
        return None
    return {
        **shown.record.fields,
        "path": str(shown.record.path),
        "agrees": agrees(shown, analysis),
    }


def render_json(analysis: Analysis, out: TextIO, *, live: Shown | None = None) -> None:
    """``Analysis.to_dict``, and ``live``: the record of the live check that named this
    incident while the job ran, with whether the analysis ``agrees`` (null: none)."""
    json.dump({**analysis.to_dict(), "live": as_json(live, analysis)}, out, indent=2, default=str)
    out.write("\n")
