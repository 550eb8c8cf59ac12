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
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb

from fr_otel.analysis.findings import (
    BlockedIn,
    Entries,
    EntryRef,
    Evidence,
    Finding,
    GroupRef,
    Stacks,
    StackSide,
    blocked_behind,
    entry_json,
    rank_list,
    ranks_words,
)

MAX_SHIFT = 4
"""Longest run of skipped collectives recognised as one skip."""
MAX_REORDER_WINDOW = 4
MAX_DETAILED_CULPRITS = 8
"""Culprits of one finding whose entries and stacks are shown (all are listed)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Slot:
    seq: int
    rank: int
    sig: int
    site: int | None
    """Hash of the user's call site (``call_site`` column); None when the dump has no frames."""
    ops: tuple[str, ...]
    record_id: int
    created_ns: int | None
    dsig: int
    """Fingerprint of the dtypes alone (tells a dtype mismatch from a size mismatch)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Majority:
    sig: int | None
    n: int
    runner_up_n: int
    signatures: int
    present: int
    absent: int
    slot: Slot | None
    """One slot that carries the majority signature (for ops, sizes and frames)."""

    @property
    def tied(self) -> bool:
        return self.signatures > 1 and self.n == self.runner_up_n


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


@dataclass(kw_only=True)
class GroupView:
    ref: GroupRef
    gid: int
    members: list[int]
    slots: dict[tuple[int, int], Slot]
    majority: dict[int, Majority]
    windows: dict[int, tuple[int, int]]
    divergent: list[int]
    precedent: dict[tuple[int, int], int | None]
    """(seq, rank) -> the signature this rank issued last time at the same call site."""
    siblings: dict[int, dict[int, int]]
    """seq -> {signature: number of sibling groups (same description and size) that
    agreed on it at that seq}: replicas of this group run the same program."""
    tie_breaks: dict[int, str] = field(default_factory=dict)
    """seq -> how a tie at that seq was broken."""
    connection: duckdb.DuckDBPyConnection | None = None
    """For the few questions about a group's history (``_skip_by_history``)."""


_GROUP_SLOTS = """
WITH wanted AS (
    SELECT s.gid, s.seq, s.rank, s.sig, s.site, s.first_record, s.created_ns, s.dsig
    FROM slots s JOIN windows w USING (gid, rank)
    WHERE s.gid = $1 AND (s.seq >= $2 OR s.seq = w.max_seq)
)
SELECT w.seq, w.rank, w.sig, w.site,
       list(e.op ORDER BY e.record_id) AS ops, w.first_record, w.created_ns, w.dsig
FROM wanted w
JOIN e ON e.gid = w.gid AND e.seq = w.seq AND e.rank = w.rank
WHERE NOT e.p2p AND e.op <> 'coalesced'
GROUP BY ALL
"""


def load_group_views(
    connection: duckdb.DuckDBPyConnection, groups: dict[int, GroupRef]
) -> list[GroupView]:
    """Everything the classifier needs about groups with at least one divergent slot."""
    divergent = connection.execute(
        "SELECT gid, min(seq) FROM slot_summary WHERE absent > 0 OR signatures > 1 GROUP BY gid"
    ).fetchall()
    views: list[GroupView] = []
    for gid, first in sorted(divergent):
        # every slot from the first divergence on, plus the last slot of members that
        # stopped before it (where a missing rank was last seen)
        # and the few slots before it: a rank that skipped a collective and then stopped
        # shows it only in its call sites there (see _skip_before_stop)
        start = max(first - MAX_SHIFT, 0)
        slot_rows = connection.execute(_GROUP_SLOTS, [gid, start]).fetchall()
        slots = {
            (row[0], row[1]): Slot(
                seq=row[0],
                rank=row[1],
                sig=row[2],
                site=row[3],
                ops=tuple(row[4] or ()),
                record_id=row[5],
                created_ns=row[6],
                dsig=row[7],
            )
            for row in slot_rows
        }
        by_seq: dict[int, list[Slot]] = {}
        for slot in slots.values():
            by_seq.setdefault(slot.seq, []).append(slot)
        majority: dict[int, Majority] = {}
        summary = connection.execute(
            "SELECT seq, majority_sig, majority_n, runner_up_n, signatures, present, absent"
            " FROM slot_summary WHERE gid = ? AND seq >= ?",
            [gid, start],
        ).fetchall()
        divergent_seqs: list[int] = []
        for seq, sig, n, runner_up, signatures, present, absent in summary:
            example = min(
                (s for s in by_seq.get(seq, []) if s.sig == sig), key=lambda s: s.rank, default=None
            )
            majority[seq] = Majority(
                sig=sig,
                n=n or 0,
                runner_up_n=runner_up or 0,
                signatures=signatures,
                present=present,
                absent=absent,
                slot=example,
            )
            if absent > 0 or signatures > 1:
                divergent_seqs.append(seq)
        windows = {
            rank: (lo, hi)
            for rank, lo, hi in connection.execute(
                "SELECT rank, min_seq, max_seq FROM windows WHERE gid = ?", [gid]
            ).fetchall()
        }
        precedent: dict[tuple[int, int], int | None] = {}
        siblings: dict[int, dict[int, int]] = {}
        ref = groups[gid]
        for seq, info in majority.items():
            if info.tied:
                precedent.update(_precedents(connection, gid, seq))
                siblings[seq] = _sibling_votes(connection, ref, seq)
        views.append(
            GroupView(
                ref=ref,
                gid=gid,
                members=list(ref.ranks or ()),
                slots=slots,
                majority=majority,
                windows=windows,
                divergent=sorted(divergent_seqs),
                precedent=precedent,
                siblings=siblings,
                connection=connection,
            )
        )
    return views


_SIBLING_VOTES = """
SELECT ss.majority_sig, count(*)
FROM slot_summary ss JOIN groups g USING (gid)
WHERE ss.seq = ? AND ss.gid <> ? AND ss.signatures = 1
  AND g.pg_desc IS NOT DISTINCT FROM ? AND len(g.members) = ?
GROUP BY 1
"""


def _sibling_votes(
    connection: duckdb.DuckDBPyConnection, group: GroupRef, seq: int
) -> dict[int, int]:
    if not group.desc:
        return {}
    rows = connection.execute(
        _SIBLING_VOTES, [seq, group.key, group.desc, len(group.ranks or ())]
    ).fetchall()
    return {sig: votes for sig, votes in rows}


_PRECEDENT = """
SELECT cur.seq, cur.rank, (
    SELECT p.sig FROM slots p
    WHERE p.gid = cur.gid AND p.rank = cur.rank AND p.site = cur.site AND p.seq < cur.seq
    ORDER BY p.seq DESC LIMIT 1
)
FROM slots cur WHERE cur.gid = ? AND cur.seq = ?
"""


def _precedents(
    connection: duckdb.DuckDBPyConnection, gid: int, seq: int
) -> dict[tuple[int, int], int | None]:
    rows = connection.execute(_PRECEDENT, [gid, seq]).fetchall()
    return {(row[0], row[1]): row[2] for row in rows}


def _break_tie(view: GroupView, seq: int) -> Majority | None:
    """A reference for a slot with no majority (a two-rank group never has one).

    First the replicas of this group (same description and size: the other dp or tp
    groups run the same program): the side they agreed on is the reference, when they
    back exactly one side. Then each rank's own history: the side whose ranks issued what
    they issued last time at the same call site, when exactly one side did.
    """
    sides: dict[int, list[Slot]] = {}
    for (t, _), slot in view.slots.items():
        if t == seq:
            sides.setdefault(slot.sig, []).append(slot)
    votes = view.siblings.get(seq, {})
    backed = [sig for sig in sides if votes.get(sig)]
    if len(backed) == 1:
        view.tie_breaks[seq] = f"{votes[backed[0]]} replica group(s) issued the same"
        return _majority_of(view, seq, sides, backed[0])
    consistent = [
        sig
        for sig, slots in sides.items()
        if all(view.precedent.get((seq, s.rank)) == sig for s in slots)
    ]
    changed = [
        sig
        for sig, slots in sides.items()
        if all(view.precedent.get((seq, s.rank)) not in (None, sig) for s in slots)
    ]
    if len(consistent) == 1 and len(changed) == len(sides) - 1:
        view.tie_breaks[seq] = "the other side changed what it issued at the same call site"
        return _majority_of(view, seq, sides, consistent[0])
    leader = _shift_leader(view, seq, sides)
    if leader is None:
        return None
    view.tie_breaks[seq] = (
        "the other side issued, from here on, what this side issued one or more collectives"
        " later: it skipped"
    )
    return _majority_of(view, seq, sides, leader)


def _follows(view: GroupView, rank: int, other: int, seq: int) -> bool:
    """Whether ``rank``'s slots from ``seq`` on are ``other``'s k slots later, for some k."""
    _, last = view.windows.get(rank, (seq, seq - 1))
    for k in range(1, MAX_SHIFT + 1):
        compared = 0
        for t in range(seq, last + 1):
            mine, theirs = view.slots.get((t, rank)), view.slots.get((t + k, other))
            if mine is None or theirs is None:
                continue
            if mine.sig != theirs.sig or (
                mine.site is not None and theirs.site is not None and mine.site != theirs.site
            ):
                compared = -1
                break
            compared += 1
        if compared > 0:
            return True
    return False


def _shift_leader(view: GroupView, seq: int, sides: dict[int, list[Slot]]) -> int | None:
    """Of two sides, the one the other follows shifted (it skipped): the reference."""
    if len(sides) != 2:
        return None
    (sig_a, side_a), (sig_b, side_b) = sides.items()
    a_follows = all(_follows(view, s.rank, side_b[0].rank, seq) for s in side_a)
    b_follows = all(_follows(view, s.rank, side_a[0].rank, seq) for s in side_b)
    if a_follows == b_follows:
        return None
    return sig_b if a_follows else sig_a


def _majority_of(view: GroupView, seq: int, sides: dict[int, list[Slot]], sig: int) -> Majority:
    old = view.majority[seq]
    return Majority(
        sig=sig,
        n=len(sides[sig]),
        runner_up_n=0,
        signatures=old.signatures,
        present=old.present,
        absent=old.absent,
        slot=min(sides[sig], key=lambda s: s.rank),
    )


def _ref(slot: Slot | None) -> EntryRef | None:
    return EntryRef(slot.rank, slot.record_id) if slot is not None else None


def _op(slot: Slot | None) -> str | None:
    return slot.ops[0] if slot is not None and slot.ops else None


def _same(a: Slot, b: Majority, *, by_site: bool = True) -> bool:
    if b.slot is None or a.sig != b.sig:
        return False
    # JSON dumps have no frames; then op, sizes and dtypes must do
    return not by_site or a.site is None or b.slot.site is None or a.site == b.slot.site


def _skip_support(view: GroupView, rank: int, seq: int, k: int, *, by_site: bool) -> int | None:
    """How many of the rank's slots from ``seq`` on equal the majority's k slots later;
    None when one contradicts it."""
    _, last = view.windows.get(rank, (seq, seq - 1))
    support = 0
    for t in range(seq, last + 1):
        slot = view.slots.get((t, rank))
        ahead = view.majority.get(t + k)
        if slot is None or ahead is None or ahead.slot is None:
            continue
        if not _same(slot, ahead, by_site=by_site):
            return None
        support += 1
    return support


def _reorder_support(view: GroupView, rank: int, seq: int, w: int) -> int | None:
    """w plus the slots after the window that line up again, when the rank's next w
    slots are the majority's next w in another order; None otherwise."""
    mine = [view.slots.get((t, rank)) for t in range(seq, seq + w)]
    theirs = [view.majority.get(t) for t in range(seq, seq + w)]
    if any(s is None for s in mine) or any(m is None or m.sig is None for m in theirs):
        return None
    my_sigs = [s.sig for s in mine if s is not None]
    their_sigs = [m.sig for m in theirs if m is not None]
    if my_sigs == their_sigs or Counter(my_sigs) != Counter(their_sigs):
        return None
    support = w
    _, last = view.windows.get(rank, (seq, seq - 1))
    for t in range(seq + w, last + 1):
        slot, majority = view.slots.get((t, rank)), view.majority.get(t)
        if slot is None or majority is None or majority.sig is None:
            continue
        if slot.sig != majority.sig:
            return None
        support += 1
    return support


def _explain_shift(view: GroupView, rank: int, seq: int) -> tuple[str, int] | None:
    """The best of "skipped k collectives" and "reordered the next w": the hypothesis
    that explains most of the rank's later slots without contradiction."""
    slot, majority = view.slots.get((seq, rank)), view.majority[seq]
    # Called from the same place as its peers' op, the rank passed something else there:
    # then only a matching call site shows it moved on to a later collective.
    same_call_as_peers = (
        slot is not None
        and majority.slot is not None
        and slot.site is not None
        and slot.site == majority.slot.site
    )
    options: list[tuple[int, int, str, int]] = []
    for w in range(2, MAX_REORDER_WINDOW + 1):
        support = _reorder_support(view, rank, seq, w)
        if support:
            options.append((support, 1, "reorder", w))
    for k in range(1, MAX_SHIFT + 1):
        support = _skip_support(view, rank, seq, k, by_site=same_call_as_peers)
        if support:
            options.append((support, 0, "skip", k))
    if not options:
        return None
    _, _, kind, size = max(options, key=lambda o: (o[0], o[1], -o[3]))
    return kind, size


def _skip_before_stop(view: GroupView, rank: int, stop: int) -> tuple[int, int] | None:
    """(seq, k) when ``rank``, whose last slot is ``stop``, skipped k collectives at seq
    before it stopped: from seq on, its slots were called from somewhere else than its
    peers' at the same seq and each equals, call site included, the peers' k later.

    The op, sizes and dtypes at those seqs can all agree (the same all_reduce on every
    step); only the call sites tell that the rank was a step ahead."""
    for seq in range(max(stop - MAX_SHIFT + 1, 0), stop + 1):
        slot, majority = view.slots.get((seq, rank)), view.majority.get(seq)
        if slot is None or majority is None or majority.slot is None:
            continue
        if slot.site is None or majority.slot.site is None or slot.site == majority.slot.site:
            continue
        for k in range(1, MAX_SHIFT + 1):
            ahead = [view.majority.get(t + k) for t in range(seq, stop + 1)]
            if all(
                m is not None and m.slot is not None and _same(view.slots[(t, rank)], m)
                for t, m in zip(range(seq, stop + 1), ahead, strict=True)
                if (t, rank) in view.slots
            ) and any((t, rank) in view.slots for t in range(seq, stop + 1)):
                return seq, k
        return None
    return None


_HISTORY = """
WITH prev AS (
    -- the last time this rank issued the same collective from the same call site
    SELECT max(p.seq) AS seq
    FROM slots p
    WHERE p.gid = $gid AND p.rank = $rank AND p.seq < $seq AND p.sig = $sig AND p.site = $site
)
SELECT s.seq - prev.seq AS k, s.sig, s.site
FROM slots s, prev
WHERE s.gid = $gid AND s.rank = $rank AND s.seq > prev.seq AND s.seq <= prev.seq + $most
  AND s.seq < $seq
ORDER BY k
"""


def _skip_by_history(view: GroupView, rank: int, seq: int) -> int | None:
    """k when ``rank`` issued at ``seq`` what the majority issued k collectives after the
    same collective, from the same call site, last time round (the previous step).

    Its peers may never get further than ``seq`` (gloo fails them at once), so their own
    later slots cannot show the shift; their history can. Call sites are required: op and
    sizes alone repeat too often."""
    slot, majority = view.slots.get((seq, rank)), view.majority.get(seq)
    reference = majority.slot if majority else None
    if view.connection is None or slot is None or reference is None:
        return None
    if slot.site is None or reference.site is None or slot.site == reference.site:
        return None
    rows = view.connection.execute(
        _HISTORY,
        {
            "gid": view.gid,
            "rank": reference.rank,
            "seq": seq,
            "sig": reference.sig,
            "site": reference.site,
            "most": MAX_SHIFT,
        },
    ).fetchall()
    for k, sig, site in rows:
        if sig == slot.sig and site == slot.site:
            # its later slots, where it has them, go on with the same step
            for j in range(1, MAX_SHIFT):
                later, expected = view.slots.get((seq + j, rank)), view.majority.get(seq + j + k)
                if later is None or expected is None or expected.slot is None:
                    break
                if not _same(later, expected):
                    return None
            return int(k)
    return None


_OWN_RECORDS = """
SELECT record_id, gid, p2p, seq, op, h, site, peer, time_created_ns
FROM e
WHERE rank = $rank AND record_id > $after AND op <> 'coalesced'
ORDER BY record_id
LIMIT $most
"""


def _skip_between_groups(view: GroupView, rank: int, seq: int, last: int) -> Slot | None:
    """The op ``rank`` issued instead of the group's collective ``seq``, when its own
    history shows it skipped that collective: after its collective ``last`` it issued,
    in every group and point-to-point, exactly what it had issued between its two
    collectives before (``last - 1`` and ``last``), and then what followed them there:
    the next step's first op instead of this step's collective.

    A pipeline stage that leaves out a step's broadcast and waits in the next step's
    receive shows only this way: the group never sees it again, and its peer, stuck in
    the broadcast, never posts the send it waits for, so the receive looks like the
    peer's fault. A rank stuck in host code before the collective issued nothing after
    the stretch, and is not a skip."""
    here, reference = view.slots.get((last, rank)), view.majority.get(seq)
    if view.connection is None or here is None or reference is None or seq != last + 1:
        return None
    if not _same(here, reference):
        return None  # its last collective is not the one it would repeat here
    before = view.connection.execute(
        "SELECT first_record FROM slots WHERE gid = ? AND rank = ? AND seq = ?",
        [view.gid, rank, last - 1],
    ).fetchone()
    if before is None:
        return None
    span = here.record_id - before[0]
    rows = view.connection.execute(
        _OWN_RECORDS, {"rank": rank, "after": before[0], "most": 3 * span + 2}
    ).fetchall()

    def own_slot(row: tuple[Any, ...]) -> bool:
        return row[1] == view.gid and not row[2] and row[3] in (last - 1, last)

    def shape(row: tuple[Any, ...]) -> tuple[Any, ...]:
        return (row[1], row[2], row[5], row[6], row[7])

    stretch = [shape(r) for r in rows if r[0] < here.record_id and not own_slot(r)]
    after = [r for r in rows if r[0] > here.record_id and not own_slot(r)]
    n = len(stretch)
    if (
        not n
        or len(after) <= n
        or any(shape(r) != stretch[i % n] for i, r in enumerate(after[: 2 * n]))
    ):
        return None
    record_id, _, _, _, op, h, site, _, created = after[n]
    return Slot(
        seq=seq,
        rank=rank,
        sig=h,
        site=site,
        ops=(op,),
        record_id=record_id,
        created_ns=created,
        dsig=0,
    )


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
    return Issued(ops=list(slot.ops), entry=_ref(slot))


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
                op=_op(reference),
                culprit_ranks=[],
                facts=evidence,
                stacks=Stacks(
                    majority=_ref(reference),
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
        culprit_frames=_ref(slot),
        evidence=SkipEvidence(
            shift=skip,
            skipped_seqs=list(range(seq, seq + skip)),
            skipped_ops=[
                _op(view.majority[t].slot) for t in range(seq, seq + skip) if t in view.majority
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
            resolved = _break_tie(view, seq)
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
                    skipped_at = _skip_before_stop(view, rank, window[1])
                    if skipped_at is not None:
                        at, skip = skipped_at
                        _add_skip(collector, view, at, rank, skip, view.slots[(at, rank)])
                        explained[rank] = math.inf
                        continue
                    went_to = _skip_between_groups(view, rank, seq, window[1])
                    if went_to is not None:
                        skipped = _add_skip(collector, view, seq, rank, 1, went_to)
                        if skipped is not None:
                            skipped.went_to = WentTo(op=_op(went_to), entry=_ref(went_to))
                        explained[rank] = math.inf
                        continue
                    last = view.slots.get((window[1], rank))
                    missing = collector.add(
                        "missing_rank",
                        seq,
                        rank,
                        culprit_slot=None,
                        culprit_frames=_ref(last),
                        evidence=MissingRankEvidence(present=majority.present),
                    )
                    if rank in missing.culprits:
                        missing.culprits[rank] = LastSeen(
                            last_seq=window[1], last_op=_op(last), entry=_ref(last)
                        )
                    explained[rank] = math.inf
                    continue
            elif _same(slot, majority) or slot.sig == majority.sig:
                continue
            shift = _explain_shift(view, rank, seq)
            if shift is not None and shift[0] == "skip":
                _add_skip(collector, view, seq, rank, shift[1], slot)
                explained[rank] = math.inf
                continue
            if slot is None:
                continue
            if shift is None:
                by_history = _skip_by_history(view, rank, seq)
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
                    culprit_frames=_ref(slot),
                    evidence=ReorderEvidence(
                        window=list(range(seq, seq + window_len)),
                        majority_order=[
                            _op(view.majority[t].slot) for t in range(seq, seq + window_len)
                        ],
                        culprit_order=[
                            _op(view.slots.get((t, rank))) for t in range(seq, seq + window_len)
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
                culprit_frames=_ref(slot),
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
                    shown=Issued(ops=list(side[0].ops), entry=_ref(side[0])),
                )
                for side in sides
            ]
        ),
        stacks=Stacks(
            sides=[StackSide(sorted(s.rank for s in side), _ref(side[0])) for side in sides]
        ),
        time_ns=min((s.created_ns for side in sides for s in side if s.created_ns), default=None),
    )


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
