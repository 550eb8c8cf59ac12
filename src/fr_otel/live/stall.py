"""Stalls: members of a group waiting in a collective that other members have not issued.

A collective completes only once every member of its group has issued it. So when a
running member issued the group's collective #S at time t and another running member has
still not issued it, the first waits there (or its work does), and the second is the
*laggard*. Past a threshold the laggard is a suspect: a stall is not proof of a fault (a
rank may be slow and catch up), so it is named as a suspect, never as a verdict.

"Has not issued" must be known, not guessed. A collective issued through the hooked
Python functions is in the rank's ring at the call; one only torch's Flight Recorder
saw (DDP's buckets) reaches the torch ring at the rank's next read of it, seconds later.
So for a laggard whose group's collectives came through the torch ring, the wait counts
only up to the moment its rings were last known complete (``ring.COMPLETE_AS_OF``, which
its mirror writes).

The threshold is ``LiveSettings.stall_s`` (30 s by default), or ``STEP_MULTIPLE`` times
the job's observed step if that is longer: the period at which the most frequent
collective of a rank recurs (once a step for a DDP bucket). Pauses every rank shares (a
checkpoint, an evaluation) leave no member ahead of another, so they are no stall at any
length.

Of the laggards, a rank that is itself ahead in some other group is waiting there, not
lagging: the stall that holds it is reported, not this one.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable, Collection, Hashable, Iterable
from dataclasses import dataclass, field

from fr_otel.live.heads import Head

STEP_MULTIPLE = 5
"""The threshold is at least this many observed steps."""
ISSUED_KEPT = 8192
"""Collectives a group keeps past its slowest running member (the oldest go first)."""
PERIODS_KEPT = 9


@dataclass(frozen=True, kw_only=True)
class Stall:
    """Running members of a group wait in a collective some running members have not
    issued, past the threshold."""

    group: str
    group_desc: str | None
    group_key: str
    members: tuple[int, ...] | None
    seq: int
    """The collective the waiting members issued and the laggards have not."""
    op: str
    site: str | None
    """Where the first waiting member issued it."""
    waiting: tuple[int, ...]
    laggards: tuple[int, ...]
    since_ns: int
    """When the first waiting member issued it."""
    waited_s: float
    """How long the laggards are known not to have issued it since (the shortest)."""
    threshold_s: float


@dataclass(kw_only=True)
class _First:
    created_ns: int
    op: str
    site: str | None


@dataclass(kw_only=True)
class _Group:
    name: str
    desc: str | None
    members: tuple[int, ...] | None
    reached: dict[int, int] = field(default_factory=dict)
    """rank -> the newest seq it issued in the group."""
    issued: dict[int, _First] = field(default_factory=dict)
    """seq -> its first issue, for seqs past the slowest running member."""
    mirrored: set[int] = field(default_factory=set)
    """Ranks whose collectives of this group came through the torch ring."""


@dataclass(kw_only=True)
class _Period:
    count: int = 0
    last_ns: int = 0
    periods: deque[int] = field(default_factory=lambda: deque(maxlen=PERIODS_KEPT))


class StallWatch:
    """The groups' progress on this host (see the module's docstring)."""

    def __init__(self, threshold_s: float) -> None:
        self.threshold_s = threshold_s
        self._groups: dict[str, _Group] = {}
        self._periods: dict[Hashable, _Period] = {}
        self._step_key: Hashable | None = None
        self._period_rank: int | None = None
        self._said: set[tuple[str, int]] = set()

    def add(self, heads: Iterable[Head]) -> None:
        for head in heads:
            group = self._groups.get(head.group_key)
            if group is None:
                group = self._groups[head.group_key] = _Group(
                    name=head.group, desc=head.group_desc, members=head.members
                )
            group.reached[head.rank] = max(group.reached.get(head.rank, head.seq), head.seq)
            if head.mirrored:
                group.mirrored.add(head.rank)
            if head.seq not in group.issued or head.created_ns < group.issued[head.seq].created_ns:
                group.issued[head.seq] = _First(
                    created_ns=head.created_ns, op=head.op, site=head.site
                )
                if len(group.issued) > 2 * ISSUED_KEPT:  # a group no other local rank is in
                    for seq in sorted(group.issued)[:ISSUED_KEPT]:
                        del group.issued[seq]
            if self._period_rank is None:
                self._period_rank = head.rank
            if head.rank == self._period_rank:  # one rank's collectives tell the step
                self._note_period((head.group_key, head.fingerprint, head.site), head)

    def _note_period(self, key: Hashable, head: Head) -> None:
        period = self._periods.get(key)
        if period is None:
            period = self._periods[key] = _Period()
        if period.count and head.created_ns > period.last_ns:
            period.periods.append(head.created_ns - period.last_ns)
        period.count += 1
        period.last_ns = max(period.last_ns, head.created_ns)
        best = self._periods.get(self._step_key) if self._step_key is not None else None
        if best is None or period.count > best.count:
            self._step_key = key

    @property
    def step_s(self) -> float | None:
        """The job's observed step: the median period of the most frequent collective of
        the first rank seen (every rank runs the same steps)."""
        best = self._periods.get(self._step_key) if self._step_key is not None else None
        if best is None or not best.periods:
            return None
        return statistics.median(best.periods) / 1e9

    @property
    def effective_threshold_s(self) -> float:
        step = self.step_s
        return max(self.threshold_s, STEP_MULTIPLE * step) if step else self.threshold_s

    def check(
        self,
        now_ns: int,
        running: Collection[int],
        complete_as_of: Callable[[int], int],
    ) -> list[Stall]:
        """The stalls past the threshold not reported before. ``complete_as_of(rank)``:
        until when the rank's torch ring is known complete (ns; 0: not known)."""
        local = frozenset(running)
        threshold = self.effective_threshold_s
        fronts: dict[str, tuple[int, list[int]]] = {}
        ahead: set[int] = set()
        for key, group in self._groups.items():
            members = group.members if group.members is not None else tuple(group.reached)
            present = [rank for rank in members if rank in local]
            if len(present) < 2:
                continue
            low = min(group.reached.get(rank, -1) for rank in present)
            _trim(group, low)
            waiting = [rank for rank in present if group.reached.get(rank, -1) > low]
            if waiting:
                fronts[key] = (low, waiting)
                ahead.update(waiting)
        found = []
        for key, (low, waiting) in fronts.items():
            group = self._groups[key]
            seq = min(s for s in group.issued if s > low)
            if (key, seq) in self._said:
                continue
            first = group.issued[seq]
            members = group.members if group.members is not None else tuple(group.reached)
            behind = [r for r in members if r in local and group.reached.get(r, -1) == low]
            late = []
            for rank in behind:
                known = now_ns if rank not in group.mirrored else min(complete_as_of(rank), now_ns)
                waited = (known - first.created_ns) / 1e9
                if waited >= threshold:
                    late.append((rank, waited))
            laggards = [rank for rank, _ in late if rank not in ahead]
            if not laggards:
                continue  # not yet, or its laggards wait in another group's stall
            self._said.add((key, seq))
            found.append(
                Stall(
                    group=group.name,
                    group_desc=group.desc,
                    group_key=key,
                    members=group.members,
                    seq=seq,
                    op=first.op,
                    site=first.site,
                    waiting=tuple(sorted(waiting)),
                    laggards=tuple(sorted(laggards)),
                    since_ns=first.created_ns,
                    waited_s=min(w for rank, w in late if rank in laggards),
                    threshold_s=threshold,
                )
            )
        return found


def _trim(group: _Group, low: int) -> None:
    """Forget what every running member has issued, and the oldest past ``ISSUED_KEPT``."""
    for seq in [s for s in group.issued if s <= low]:
        del group.issued[seq]
    if len(group.issued) > ISSUED_KEPT:
        for seq in sorted(group.issued)[: len(group.issued) - ISSUED_KEPT]:
            del group.issued[seq]
