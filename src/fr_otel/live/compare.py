"""The cheap pre-check: members of a group that issued different collectives at the same
(group, collective seq).

Each collective a rank issued waits on the board at its slot (group name, seq) until every
local member of the group has reached that seq; a slot whose members' fingerprints or
known call sites differ is then a *candidate*, which the analyzer confirms or clears
(``confirm``). Waiting for every member matters twice: the analysis of a running job reads
each group only up to the last collective all its members issued, and a candidate then
carries every member's collective. The pre-check may say too much, never too little: a
difference the analyzer knows to be legal (a root's scatter list) costs one analysis,
remembered by its pattern so that the next step's does not. A slot where a rank issued
several collectives (a coalesced batch) is left to the analysis of the incident.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable
from dataclasses import dataclass, field

import numpy as np

from fr_otel.live.columns import UNKNOWN, Columns, Ids, groups_of, note_reached
from fr_otel.live.heads import Head, columns_of, head_at

SLOTS_PER_GROUP = 8192
"""Slots a group keeps while some local member has not reached them (the oldest go
first): a member whose collectives come late (its torch ring is brought up to date at the
rank's reads of torch's FR, seconds apart) is compared over this many of its group's
newest collectives."""


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A slot whose members issued different collectives."""

    group: str
    """The group's name."""
    members: tuple[int, ...] | None
    seq: int
    heads: tuple[Head, ...]
    """Each local member's collective there, by rank."""

    @property
    def divergence_ns(self) -> int:
        """When the evidence first existed: the creation of the first collective at the
        slot that differs from one issued before it."""
        seen: list[Head] = []
        for head in sorted(self.heads, key=lambda h: h.created_ns):
            if any(_differ(head, other) for other in seen):
                return head.created_ns
            seen.append(head)
        return max(head.created_ns for head in self.heads)

    @property
    def pattern(self) -> Hashable:
        """What the members issued, without who: a slot of the same pattern that the
        analyzer cleared once is cleared again without it."""
        return (self.group, self.members, frozenset((h.fingerprint, h.site) for h in self.heads))

    @property
    def ranks(self) -> list[int]:
        return [head.rank for head in self.heads]


def _differ(one: Head, other: Head) -> bool:
    if one.fingerprint != other.fingerprint:
        return True
    return one.site is not None and other.site is not None and one.site != other.site


@dataclass(kw_only=True)
class _Group:
    members: tuple[int, ...] | None
    reached: dict[int, int] = field(default_factory=dict)
    """rank -> the newest seq it issued in the group."""
    pending: list[Columns] = field(default_factory=list)
    """Rows no settle has compared yet."""
    settled: int = -1
    """Seqs up to here were compared (a row that comes for one later is compared with
    the others of its look alone)."""

    def lowest(self, local: frozenset[int]) -> int | None:
        """The newest seq every running local member has reached (None: none runs); a
        slot past it is waited for."""
        members = self.members if self.members is not None else self.reached
        reached = [self.reached.get(rank, -1) for rank in members if rank in local]
        return min(reached) if reached else None


class Board:
    """The collectives of this host's ranks, per group and slot (see the module's
    docstring). Rows come as columns (``columns``); a slot whose members agree costs
    array operations, never an object."""

    def __init__(self, ids: Ids | None = None) -> None:
        self.ids = ids if ids is not None else Ids()
        self._groups: dict[int, _Group] = {}
        self._local: frozenset[int] = frozenset()

    def add(self, heads: Iterable[Head], running: Collection[int]) -> list[Candidate]:
        """``add_columns`` for heads made one by one."""
        return self.add_columns([columns_of(heads, self.ids)], running)

    def add_columns(self, looked: Iterable[Columns], running: Collection[int]) -> list[Candidate]:
        """Place a look's rows; return the candidates now complete. ``running``: the ranks
        whose rings this host holds and that still run (a slot waits for those alone)."""
        local = frozenset(running)
        moved: set[int] = set()
        for key, mine in groups_of(looked):
            group = self._groups.get(key)
            if group is None:
                group = self._groups[key] = _Group(members=self.ids.groups[key].members)
            note_reached(group.reached, mine)
            group.pending.append(mine)
            moved.add(key)
        # a slot is settled when a member reaches it or a member stops: only groups that
        # got rows are looked at again, unless the running ranks changed
        changed = local != self._local
        self._local = local
        found = []
        for key, group in self._groups.items():
            if not group.pending or (not changed and key not in moved):
                continue
            low = group.lowest(local)
            upto = low if low is not None else max(group.reached.values())
            found += self._settle(group, max(upto, group.settled))
        return sorted(found, key=lambda c: (c.heads[0].group_key, c.seq))

    def _settle(self, group: _Group, upto: int) -> list[Candidate]:
        """Compare the pending rows up to ``upto``; keep the rest (the newest
        ``SLOTS_PER_GROUP`` seqs)."""
        rows = Columns.concat(group.pending)
        due = rows.seq <= upto
        later = rows.select(~due)
        if len(later):
            later = later.select(later.seq > max(group.reached.values()) - SLOTS_PER_GROUP)
        group.pending = [later] if len(later) else []
        group.settled = upto
        if due.sum() < 2:
            return []
        rows = rows.select(due)
        order = np.lexsort((rows.rank, rows.seq))
        seq, rank = rows.seq[order], rows.rank[order]
        starts = np.flatnonzero(np.r_[True, seq[1:] != seq[:-1]])
        if len(starts) == len(seq):
            return []  # one member's row at each seq: nothing to compare
        fp = rows.fp[order]
        site = rows.site[order]
        known = site != UNKNOWN
        # members differ by fingerprint, or by call site where both know theirs
        low_site = np.minimum.reduceat(np.where(known, site, np.iinfo(np.int64).max), starts)
        high_site = np.maximum.reduceat(np.where(known, site, -1), starts)
        differ = (np.minimum.reduceat(fp, starts) != np.maximum.reduceat(fp, starts)) | (
            (high_site >= 0) & (low_site != high_site)
        )
        if not differ.any():
            return []
        # a second collective of one rank at one seq: a batch, left to the incident
        twice = np.flatnonzero((seq[1:] == seq[:-1]) & (rank[1:] == rank[:-1]))
        batched = set(seq[twice + 1].tolist())
        found = []
        ends = np.r_[starts[1:], len(seq)]
        for at in np.flatnonzero(differ).tolist():
            if int(seq[starts[at]]) in batched:
                continue
            heads = tuple(head_at(self.ids, rows, int(row)) for row in order[starts[at] : ends[at]])
            found.append(
                Candidate(
                    group=heads[0].group, members=group.members, seq=heads[0].seq, heads=heads
                )
            )
        return found

    def frontier(self, candidate: Candidate, running: Collection[int]) -> int:
        """The newest seq every running local member of the candidate's group has
        reached (when none runs, the newest any reached): how far the analysis of a
        snapshot reads the group."""
        key = self.ids.group_of(candidate.heads[0].group_key)
        group = self._groups.get(key) if key is not None else None
        if group is None:
            return candidate.seq
        low = group.lowest(frozenset(running))
        return low if low is not None else max(group.reached.values(), default=candidate.seq)
