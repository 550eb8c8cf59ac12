"""What a divergence finding carries: the majority's entry, each culprit's (or where a
missing one was last seen), then its kind's own facts; as JSON and as the report's
sentence.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from fr_otel.analysis.findings import (
    BlockedIn,
    Entries,
    EntryRef,
    Evidence,
    Finding,
    blocked_behind,
    entry_json,
    rank_list,
    ranks_words,
)

MAX_DETAILED_CULPRITS = 8
"""Culprits of one finding whose entries and stacks are shown (all are listed)."""


@dataclass(kw_only=True)
class Issued:
    """An entry as a divergence shows it: its ops, then (resolved) sizes and dtypes."""

    ops: list[str]
    entry: EntryRef | None

    def to_dict(self, entries: Entries) -> dict[str, Any]:
        return {"ops": self.ops, **entry_json(self.entry, entries)}


@dataclass(kw_only=True)
class LastSeen:
    """A missing rank's last collective in the group, and where it is blocked instead."""

    last_seq: int
    last_op: str | None
    entry: EntryRef | None
    blocked_in: str | None = None

    def to_dict(self, entries: Entries) -> dict[str, Any]:
        out: dict[str, Any] = {"last_seq": self.last_seq, "last_op": self.last_op}
        if self.blocked_in is not None:
            out["blocked_in"] = self.blocked_in
        return {**out, **entry_json(self.entry, entries)}


Culprit = Issued | LastSeen | BlockedIn | None


@dataclass(kw_only=True)
class SlotEvidence(Evidence):
    """Evidence of a divergence at one slot: the majority's entry and each culprit's
    (the first ``MAX_DETAILED_CULPRITS``), then the kind's own facts."""

    majority: Issued | None = None
    culprits: dict[int, Culprit] = field(default_factory=dict)

    def own(self, entries: Entries) -> dict[str, Any]:
        return {
            "majority": self.majority.to_dict(entries) if self.majority else None,
            "culprits": {
                str(rank): c.to_dict(entries) if c is not None else None
                for rank, c in self.culprits.items()
            },
            **super().own(entries),
            **self.kind_facts(entries),
        }

    def kind_facts(self, entries: Entries) -> dict[str, Any]:
        """The kind's keys that are not shown as they are (after ``JSON_FIELDS``)."""
        return {}

    def own_refs(self) -> Iterator[EntryRef]:
        shown = [self.majority, *self.culprits.values()]
        for item in shown:
            if isinstance(item, Issued | LastSeen) and item.entry is not None:
                yield item.entry

    def blocked(self, rank: int, where: str) -> None:
        """``rank`` never issued the collective: it is blocked in ``where`` instead."""
        current = self.culprits.get(rank)
        if isinstance(current, LastSeen):
            current.blocked_in = where
        else:
            self.culprits[rank] = BlockedIn(where)

    def merge_culprits(self, other: Evidence) -> None:
        if isinstance(other, SlotEvidence):
            for rank, culprit in other.culprits.items():
                self.culprits.setdefault(rank, culprit)

    def sentence(self, finding: Finding) -> str:
        return self.headline(finding)

    def shown(self, finding: Finding, item: Culprit) -> dict[str, Any]:
        return item.to_dict(finding.entries) if item is not None else {}


@dataclass(kw_only=True)
class MissingRankEvidence(SlotEvidence):
    present: int

    JSON_FIELDS = ("present",)

    def headline(self, finding: Finding) -> str:
        return _missing_summary(finding, self)


@dataclass(kw_only=True)
class WentTo:
    """What a rank issued instead of a collective it skipped (seen in another group)."""

    op: str | None
    entry: EntryRef | None

    def to_dict(self, entries: Entries) -> dict[str, Any]:
        return {"op": self.op, **entry_json(self.entry, entries)}


@dataclass(kw_only=True)
class SkipEvidence(SlotEvidence):
    shift: int
    skipped_seqs: list[int]
    skipped_ops: list[str | None]
    went_to: WentTo | None = None
    by: str | None = None

    JSON_FIELDS = ("shift", "skipped_seqs", "skipped_ops")

    def kind_facts(self, entries: Entries) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.went_to is not None:
            out["went_to"] = self.went_to.to_dict(entries)
        if self.by is not None:
            out["by"] = self.by
        return out

    def own_refs(self) -> Iterator[EntryRef]:
        yield from super().own_refs()
        if self.went_to is not None and self.went_to.entry is not None:
            yield self.went_to.entry

    def headline(self, finding: Finding) -> str:
        who, where = _who(finding), finding.place()
        skipped = ", ".join(str(s) for s in self.skipped_ops)
        if self.went_to is not None:
            return (
                f"{who} skipped {skipped} at {where}: it issued the ops that led to it in the"
                f" step before, then what had followed it ({self.went_to.op}) instead"
            )
        if self.by:
            return (
                f"{who} skipped {skipped} at {where} and went on: it issued what its peers"
                " issued next, from the same call site, in the steps before"
            )
        return f"{who} skipped {skipped} at {where} and went on; its later collectives are shifted"


@dataclass(kw_only=True)
class ReorderEvidence(SlotEvidence):
    window: list[int]
    majority_order: list[str | None]
    culprit_order: list[str | None]

    JSON_FIELDS = ("window", "majority_order", "culprit_order")

    def headline(self, finding: Finding) -> str:
        return (
            f"{_who(finding)} issued the collectives of {finding.place()} in a different order"
            f" than {self.majority_order}"
        )


@dataclass(kw_only=True)
class MismatchEvidence(SlotEvidence):
    """``op_type_mismatch``, ``dtype_mismatch``, ``size_mismatch`` against the majority."""

    reference: str | None = None
    """How a tie was broken, when there was one."""

    def kind_facts(self, entries: Entries) -> dict[str, Any]:
        return {"reference": self.reference} if self.reference is not None else {}

    def headline(self, finding: Finding) -> str:
        who, where, op = _who(finding), finding.place(), finding.op or "?"
        first = finding.culprit_ranks[0] if finding.culprit_ranks else None
        culprit = self.shown(finding, self.culprits.get(first) if first is not None else None)
        majority = self.shown(finding, self.majority)
        if finding.kind == "op_type_mismatch":
            issued = ", ".join(culprit.get("ops", []))
            return f"{who} issued {issued} where its peers issued {op} ({where})"
        if finding.kind == "dtype_mismatch":
            return (
                f"{who} used dtype {culprit.get('input_dtypes')} in {op} where its peers used"
                f" {majority.get('input_dtypes')} ({where})"
            )
        return (
            f"{who} passed sizes {culprit.get('input_sizes')} to {op} where its peers passed"
            f" {majority.get('input_sizes')} ({where})"
        )


@dataclass(kw_only=True)
class Side:
    """One side of a tie: its ranks and what one of them issued."""

    ranks: list[int]
    shown: Issued

    def to_dict(self, entries: Entries) -> dict[str, Any]:
        return {"ranks": self.ranks, **self.shown.to_dict(entries)}


@dataclass(kw_only=True)
class SidesEvidence(Evidence):
    """A slot with two signatures of equal support: no majority, no culprit."""

    ambiguous: bool = True
    sides: list[Side]

    def own(self, entries: Entries) -> dict[str, Any]:
        return {"ambiguous": True, "sides": [side.to_dict(entries) for side in self.sides]}

    def own_refs(self) -> Iterator[EntryRef]:
        for side in self.sides:
            if side.shown.entry is not None:
                yield side.shown.entry

    def headline(self, finding: Finding) -> str:
        sides = " vs ".join(
            f"ranks {side.ranks} ({', '.join(side.shown.ops)})" for side in self.sides
        )
        return f"{finding.kind.replace('_', ' ')} at {finding.place()} with no majority: {sides}"


def _who(finding: Finding) -> str:
    return ranks_words(finding.culprit_ranks)


def _missing_summary(finding: Finding, facts: MissingRankEvidence) -> str:
    op, where = finding.op or "?", finding.place()
    absent = sorted(finding.absent_ranks or {*finding.culprit_ranks, *finding.waiting_ranks})
    if facts.replicas:
        desc = finding.group.desc or "?"
        where = f"collective #{finding.collective_seq_id} of {len(facts.replicas)} {desc} groups"
    their = "their" if len(absent) > 1 else "its"
    sentence = (
        f"{ranks_words(absent)} never issued {op} {where}, which {their} peers are waiting in"
    )
    cause = finding.consequence_of
    if facts.candidate_ranks:
        suspects = rank_list(facts.candidate_ranks)
        return f"{sentence}; suspects: ranks {suspects}: {facts.reason}"
    if facts.candidate and cause is not None:
        return f"{sentence}; a candidate of [{cause}], which the evidence cannot order"
    return sentence + blocked_behind(sorted(finding.waiting_ranks), absent, cause)
