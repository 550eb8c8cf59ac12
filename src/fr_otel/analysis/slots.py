"""A divergent group's slots, as the divergence classifier reads them.

SQL (``sql/02_slots.sql``) has lined every group's collectives up by sequence number and
found, per slot, the majority's signature and which members are absent. Each group with a
divergent slot is loaded here once (``load_group_views``): its members' slots from a few
before the first divergence on, each slot's majority, each member's window of sequence
numbers and, for a slot with no majority, what breaking the tie reads (each rank's last
signature at the same call site, the votes of its replica groups).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

from fr_otel.analysis.findings import EntryRef, GroupRef

MAX_SHIFT = 4
"""Longest run of skipped collectives recognised as one skip."""


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
    """For the few questions about a group's history (``shifts.skip_by_history``)."""


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
        # shows it only in its call sites there (see shifts.skip_before_stop)
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


def slot_ref(slot: Slot | None) -> EntryRef | None:
    return EntryRef(slot.rank, slot.record_id) if slot is not None else None


def slot_op(slot: Slot | None) -> str | None:
    return slot.ops[0] if slot is not None and slot.ops else None


def matches_majority(a: Slot, b: Majority, *, by_site: bool = True) -> bool:
    if b.slot is None or a.sig != b.sig:
        return False
    # JSON dumps have no frames; then op, sizes and dtypes must do
    return not by_site or a.site is None or b.slot.site is None or a.site == b.slot.site
