"""Where a rank stops agreeing with its group, and why.

SQL (``sql/02_slots.sql``) has already lined every group's collectives up by sequence
number and found, per slot, the majority's signature and which members are absent. This
module looks only at the divergent slots and classifies each deviating rank once, at its
first divergence in the group:

- nothing at or after the slot: ``missing_rank`` (it stopped there), unless its own ops
  in other groups and point-to-point show it went past: it issued what had led to this
  collective the step before, then what had followed it (``skipped_collective``);
- its later slots equal the majority's k slots later (by op, sizes, dtypes and call
  site): ``skipped_collective``, reported once instead of the cascade the shift causes;
- the next few slots hold the same collectives in another order: ``reordered_collectives``;
- otherwise ``op_type_mismatch`` / ``dtype_mismatch`` / ``size_mismatch`` against the
  majority. A tie for majority is reported with no culprit, never resolved by file order.

The group's slots come from ``slots``; ties are broken in ``ties``, skips and reorders
tested in ``shifts``; what each finding carries is in ``divergence_evidence``.
"""

from __future__ import annotations

import math

from fr_otel.analysis.divergence_evidence import (
    MAX_DETAILED_CULPRITS,
    Issued,
    LastSeen,
    MismatchEvidence,
    MissingRankEvidence,
    ReorderEvidence,
    Side,
    SidesEvidence,
    SkipEvidence,
    SlotEvidence,
    WentTo,
)
from fr_otel.analysis.findings import EntryRef, Finding, Stacks, StackSide
from fr_otel.analysis.shifts import (
    explain_shift,
    skip_before_stop,
    skip_between_groups,
    skip_by_history,
)
from fr_otel.analysis.slots import GroupView, Slot, matches_majority, slot_op, slot_ref
from fr_otel.analysis.ties import break_tie


def _mismatch_kind(slot: Slot, reference: Slot) -> str:
    if slot.ops != reference.ops:
        return "op_type_mismatch"
    if slot.dsig != reference.dsig:
        return "dtype_mismatch"
    return "size_mismatch"


def _describe(slot: Slot | None) -> Issued | None:
    if slot is None:
        return None
    # sizes and dtypes are read from the archive at the end (``resolve_entries``)
    return Issued(ops=list(slot.ops), entry=slot_ref(slot))


class _Collector:
    """Merges deviations of the same kind at the same slot into one finding."""

    def __init__(self, view: GroupView) -> None:
        self.view = view
        self.findings: dict[tuple[str, int, int], Finding] = {}
        self.facts: dict[tuple[str, int, int], SlotEvidence] = {}
        self.frames: dict[tuple[str, int, int], dict[int, EntryRef | None]] = {}

    def add(
        self,
        kind: str,
        seq: int,
        rank: int,
        *,
        variant: int = 0,
        culprit_slot: Slot | None,
        culprit_frames: EntryRef | None,
        evidence: SlotEvidence,
    ) -> SlotEvidence:
        """Add ``rank`` to the finding of ``kind`` at ``seq``; ``evidence`` is its
        evidence when this makes the finding. Returns the finding's evidence."""
        view = self.view
        majority = view.majority.get(seq)
        reference = majority.slot if majority else None
        key = (kind, seq, variant)
        finding = self.findings.get(key)
        if finding is None:
            present = [
                s.created_ns
                for (t, _), s in view.slots.items()
                if t == seq and majority and s.sig == majority.sig and s.created_ns is not None
            ]
            evidence.majority = _describe(reference)
            culprit: dict[int, EntryRef | None] = {}
            finding = Finding(
                kind=kind,
                group=view.ref,
                collective_seq_id=seq,
                op=slot_op(reference),
                culprit_ranks=[],
                facts=evidence,
                stacks=Stacks(
                    majority=slot_ref(reference),
                    majority_rank=reference.rank if reference else None,
                    culprit=culprit,
                ),
                time_ns=min(present)
                if present
                else (culprit_slot.created_ns if culprit_slot else None),
            )
            self.findings[key] = finding
            self.facts[key] = evidence
            self.frames[key] = culprit
        finding.culprit_ranks.append(rank)
        facts = self.facts[key]
        if len(finding.culprit_ranks) <= MAX_DETAILED_CULPRITS:
            facts.culprits[rank] = _describe(culprit_slot)
            self.frames[key][rank] = culprit_frames
        return facts


def _add_skip(
    collector: _Collector, view: GroupView, seq: int, rank: int, skip: int, slot: Slot | None
) -> SkipEvidence | None:
    """``rank`` skipped the ``skip`` collectives from ``seq`` on; ``slot`` is its own there."""
    facts = collector.add(
        "skipped_collective",
        seq,
        rank,
        variant=skip,
        culprit_slot=slot,
        culprit_frames=slot_ref(slot),
        evidence=SkipEvidence(
            shift=skip,
            skipped_seqs=list(range(seq, seq + skip)),
            skipped_ops=[
                slot_op(view.majority[t].slot) for t in range(seq, seq + skip) if t in view.majority
            ],
        ),
    )
    return facts if isinstance(facts, SkipEvidence) else None


def classify(view: GroupView) -> list[Finding]:
    """The findings of one group with divergent slots."""
    collector = _Collector(view)
    explained: dict[int, float] = {}
    ambiguous: list[Finding] = []
    # break every tie first: skip and reorder tests compare against later slots too
    for seq in view.divergent:
        if view.majority[seq].tied:
            resolved = break_tie(view, seq)
            if resolved is not None:
                view.majority[seq] = resolved
    for seq in view.divergent:
        majority = view.majority[seq]
        if majority.tied:
            if all(explained.get(r, -1) >= seq for r in view.members):
                continue
            ambiguous.append(_ambiguous(view, seq))
            for rank in view.members:
                explained[rank] = math.inf
            continue
        for rank in view.members:
            if explained.get(rank, -1) >= seq:
                continue
            slot = view.slots.get((seq, rank))
            window = view.windows.get(rank)
            if slot is None:
                if window is None or window[0] > seq:
                    continue  # evicted from its ring buffer, or no dump: unknown, not absent
                if window[1] < seq:
                    skipped_at = skip_before_stop(view, rank, window[1])
                    if skipped_at is not None:
                        at, skip = skipped_at
                        _add_skip(collector, view, at, rank, skip, view.slots[(at, rank)])
                        explained[rank] = math.inf
                        continue
                    went_to = skip_between_groups(view, rank, seq, window[1])
                    if went_to is not None:
                        skipped = _add_skip(collector, view, seq, rank, 1, went_to)
                        if skipped is not None:
                            skipped.went_to = WentTo(op=slot_op(went_to), entry=slot_ref(went_to))
                        explained[rank] = math.inf
                        continue
                    last = view.slots.get((window[1], rank))
                    missing = collector.add(
                        "missing_rank",
                        seq,
                        rank,
                        culprit_slot=None,
                        culprit_frames=slot_ref(last),
                        evidence=MissingRankEvidence(present=majority.present),
                    )
                    if rank in missing.culprits:
                        missing.culprits[rank] = LastSeen(
                            last_seq=window[1], last_op=slot_op(last), entry=slot_ref(last)
                        )
                    explained[rank] = math.inf
                    continue
            elif matches_majority(slot, majority) or slot.sig == majority.sig:
                continue
            shift = explain_shift(view, rank, seq)
            if shift is not None and shift[0] == "skip":
                _add_skip(collector, view, seq, rank, shift[1], slot)
                explained[rank] = math.inf
                continue
            if slot is None:
                continue
            if shift is None:
                by_history = skip_by_history(view, rank, seq)
                if by_history is not None:
                    skipped = _add_skip(collector, view, seq, rank, by_history, slot)
                    if skipped is not None:
                        skipped.by = (
                            "history: its peers issued this after the skipped collective last time"
                        )
                    explained[rank] = math.inf
                    continue
            if shift is not None and shift[0] == "reorder":
                window_len = shift[1]
                collector.add(
                    "reordered_collectives",
                    seq,
                    rank,
                    variant=window_len,
                    culprit_slot=slot,
                    culprit_frames=slot_ref(slot),
                    evidence=ReorderEvidence(
                        window=list(range(seq, seq + window_len)),
                        majority_order=[
                            slot_op(view.majority[t].slot) for t in range(seq, seq + window_len)
                        ],
                        culprit_order=[
                            slot_op(view.slots.get((t, rank))) for t in range(seq, seq + window_len)
                        ],
                    ),
                )
                explained[rank] = seq + window_len - 1
                continue
            reference = majority.slot
            if reference is None:
                continue
            collector.add(
                _mismatch_kind(slot, reference),
                seq,
                rank,
                culprit_slot=slot,
                culprit_frames=slot_ref(slot),
                evidence=MismatchEvidence(reference=view.tie_breaks.get(seq)),
            )
            # later slots of a rank that already diverged here are its cascade
            explained[rank] = math.inf
    findings = list(collector.findings.values()) + ambiguous
    for finding in findings:
        finding.culprit_ranks.sort()
        if finding.kind == "missing_rank":
            finding.absent_ranks = frozenset(finding.culprit_ranks)
    return findings


def _ambiguous(view: GroupView, seq: int) -> Finding:
    """Two signatures with equal support: say so, blame no one."""
    by_sig: dict[int, list[Slot]] = {}
    for (t, _), slot in view.slots.items():
        if t == seq:
            by_sig.setdefault(slot.sig, []).append(slot)
    sides = sorted(by_sig.values(), key=lambda slots: (-len(slots), min(s.rank for s in slots)))
    a, b = sides[0][0], sides[1][0]
    kind = _mismatch_kind(b, a)
    return Finding(
        kind=kind,
        group=view.ref,
        collective_seq_id=seq,
        op=None,
        culprit_ranks=[],
        facts=SidesEvidence(
            sides=[
                Side(
                    ranks=sorted(s.rank for s in side),
                    shown=Issued(ops=list(side[0].ops), entry=slot_ref(side[0])),
                )
                for side in sides
            ]
        ),
        stacks=Stacks(
            sides=[StackSide(sorted(s.rank for s in side), slot_ref(side[0])) for side in sides]
        ),
        time_ns=min((s.created_ns for side in sides for s in side if s.created_ns), default=None),
    )
