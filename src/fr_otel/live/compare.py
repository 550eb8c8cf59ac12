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

from fr_otel.live.heads import Head

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


_Key = str
"""A group: its name and its members (``Head.group_key``)."""


@dataclass(kw_only=True)
class _Group:
    slots: dict[int, dict[int, Head]] = field(default_factory=dict)
    """seq -> rank -> head, for slots some local member has not reached yet."""
    batched: set[int] = field(default_factory=set)
    reached: dict[int, int] = field(default_factory=dict)
    """rank -> the newest seq it issued in the group."""
    members: tuple[int, ...] | None

    def lowest(self, local: frozenset[int]) -> int | None:
        """The newest seq every running local member has reached (None: none runs); a
        slot past it is waited for."""
        members = self.members if self.members is not None else self.reached
        reached = [self.reached.get(rank, -1) for rank in members if rank in local]
        return min(reached) if reached else None


class Board:
    """The collectives of this host's ranks, per group and slot (see the module's
    docstring)."""

    def __init__(self) -> None:
        self._groups: dict[_Key, _Group] = {}
        self._differing: set[tuple[_Key, int]] = set()
        """Slots whose members differ, waiting for the rest of the group."""
        self._local: frozenset[int] = frozenset()

    def add(self, heads: Iterable[Head], running: Collection[int]) -> list[Candidate]:
        """Place new heads; return the candidates now complete. ``running``: the ranks
        whose rings this host holds and that still run (a slot waits for those alone)."""
        local = frozenset(running)
        touched: set[tuple[_Key, int]] = set()
        moved: set[_Key] = set()
        for head in heads:
            # one name can stand for several groups (a mesh's tp groups, replicas): a
            # group is its name and its members
            key = head.group_key
            moved.add(key)
            group = self._groups.get(key)
            if group is None:
                group = self._groups[key] = _Group(members=head.members)
            group.reached[head.rank] = max(group.reached.get(head.rank, head.seq), head.seq)
            if head.seq in group.batched:
                continue
            at = group.slots.setdefault(head.seq, {})
            if head.rank in at:  # a second collective at one seq: a batch
                group.batched.add(head.seq)
                del group.slots[head.seq]
                self._differing.discard((key, head.seq))
                continue
            at[head.rank] = head
            touched.add((key, head.seq))
        for key, seq in touched:
            held = self._groups[key].slots.get(seq)
            if held is not None and len(held) > 1:
                first, *others = held.values()
                if any(_differ(first, other) for other in others):
                    self._differing.add((key, seq))
        found = []
        lowest = {key: group.lowest(local) for key, group in self._groups.items()}
        for key, seq in sorted(self._differing):
            low = lowest[key]
            if low is not None and low < seq:
                continue
            self._differing.discard((key, seq))
            group = self._groups[key]
            at = group.slots.pop(seq, {})
            heads_there = tuple(at[r] for r in sorted(at))
            found.append(
                Candidate(
                    group=heads_there[0].group,
                    members=group.members,
                    seq=seq,
                    heads=heads_there,
                )
            )
        # a slot is settled when a member reaches it or a member stops: only groups that
        # got heads are looked at again, unless the running ranks changed
        changed = local != self._local
        self._local = local
        for key, group in self._groups.items():
            if not changed and key not in moved:
                continue
            low = lowest[key]
            for seq in [s for s in group.slots if (key, s) not in self._differing]:
                if low is None or seq <= low:
                    del group.slots[seq]  # every local member issued the same: nothing to see
            _trim(key, group, self._differing)
        return found

    def frontier(self, candidate: Candidate, running: Collection[int]) -> int:
        """The newest seq every running local member of the candidate's group has
        reached (when none runs, the newest any reached): how far the analysis of a
        snapshot reads the group."""
        group = self._groups.get(candidate.heads[0].group_key)
        if group is None:
            return candidate.seq
        low = group.lowest(frozenset(running))
        return low if low is not None else max(group.reached.values(), default=candidate.seq)


def _trim(key: _Key, group: _Group, differing: set[tuple[_Key, int]]) -> None:
    if len(group.slots) > SLOTS_PER_GROUP:
        for seq in sorted(group.slots)[: len(group.slots) - SLOTS_PER_GROUP]:
            del group.slots[seq]
            differing.discard((key, seq))
    if len(group.batched) > SLOTS_PER_GROUP:
        group.batched = set(sorted(group.batched)[-SLOTS_PER_GROUP:])
