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
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fr_otel.live.columns import Columns, Ids, groups_of, note_reached
from fr_otel.live.heads import Head, columns_of, head_at

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
class _Group:
    reached: dict[int, int] = field(default_factory=dict)
    """rank -> the newest seq it issued in the group."""
    issued: list[Columns] = field(default_factory=list)
    """Rows of seqs past the slowest running member (at the last check)."""
    mirrored: set[int] = field(default_factory=set)
    """Ranks whose collectives of this group came through the torch ring."""

    def rows(self) -> int:
        return sum(len(rows) for rows in self.issued)


@dataclass(kw_only=True)
class _Period:
    count: int = 0
    last_ns: int = 0
    periods: deque[int] = field(default_factory=lambda: deque(maxlen=PERIODS_KEPT))


class StallWatch:
    """The groups' progress on this host (see the module's docstring)."""

    def __init__(self, threshold_s: float, ids: Ids | None = None) -> None:
        self.threshold_s = threshold_s
        self.ids = ids if ids is not None else Ids()
        self._groups: dict[int, _Group] = {}
        self._periods: dict[tuple[int, int, int], _Period] = {}
        self._step_key: tuple[int, int, int] | None = None
        self._period_rank: int | None = None
        self._said: set[tuple[int, int]] = set()

    def add(self, heads: Iterable[Head]) -> None:
        """``add_columns`` for heads made one by one."""
        self.add_columns([columns_of(heads, self.ids)])

    def add_columns(self, looked: Iterable[Columns]) -> None:
        looked = list(looked)
        for key, mine in groups_of(looked):
            group = self._groups.get(key)
            if group is None:
                group = self._groups[key] = _Group()
            note_reached(group.reached, mine)
            if mine.mirrored.any():
                group.mirrored.update(np.unique(mine.rank[mine.mirrored]).tolist())
            group.issued.append(mine)
            if group.rows() > 2 * ISSUED_KEPT:  # a group no other local rank is in
                _trim(group, -1)
        for rows in looked:
            if not len(rows):
                continue
            if self._period_rank is None:
                self._period_rank = int(rows.rank[0])
            # one rank's collectives tell the step
            self._note_periods(rows.select(rows.rank == self._period_rank))

    def _note_periods(self, rows: Columns) -> None:
        if not len(rows):
            return
        for key, created in _by_key(rows):
            period = self._periods.get(key)
            if period is None:
                period = self._periods[key] = _Period()
            before = np.maximum.accumulate(np.r_[period.last_ns, created])[:-1]
            counted = period.count + np.arange(len(created))
            gaps = (created - before)[(counted > 0) & (created > before)]
            period.periods.extend(gaps[-PERIODS_KEPT:].tolist())
            period.count += len(created)
            period.last_ns = max(period.last_ns, int(created.max()))
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
        fronts: dict[int, tuple[int, list[int]]] = {}
        ahead: set[int] = set()
        for key, group in self._groups.items():
            members = self._members(key, group)
            present = [rank for rank in members if rank in local]
            if len(present) < 2:
                continue
            low = min(group.reached.get(rank, -1) for rank in present)
            _trim(group, low)
            waiting = [rank for rank in present if group.reached.get(rank, -1) > low]
            if waiting and group.issued:
                fronts[key] = (low, waiting)
                ahead.update(waiting)
        found = []
        for key, (low, waiting) in fronts.items():
            group = self._groups[key]
            [rows] = group.issued
            seq = int(rows.seq.min())
            if (key, seq) in self._said:
                continue
            at = np.flatnonzero(rows.seq == seq)
            first = head_at(self.ids, rows, int(at[np.argmin(rows.created[at])]))
            members = self._members(key, group)
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
                    group=first.group,
                    group_desc=first.group_desc,
                    group_key=first.group_key,
                    members=first.members,
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

    def _members(self, key: int, group: _Group) -> tuple[int, ...]:
        members = self.ids.groups[key].members
        return members if members is not None else tuple(group.reached)


_BITS = 21
"""Ids packed three to an int64 (as long as each is below 2**21: a host's distinct
groups, fingerprints and sites)."""


def _by_key(rows: Columns) -> Iterable[tuple[tuple[int, int, int], Any]]:
    """(group, fingerprint, site) and the creation times of its rows, each key once."""
    site = rows.site + 1  # UNKNOWN is -1
    if max(int(rows.key.max()), int(rows.fp.max()), int(site.max())) < 1 << _BITS:
        packed = (rows.key << (2 * _BITS)) | (rows.fp << _BITS) | site
        if packed.min() == packed.max():
            yield (int(rows.key[0]), int(rows.fp[0]), int(rows.site[0])), rows.created
            return
        for code in np.unique(packed).tolist():
            key = (code >> (2 * _BITS), (code >> _BITS) & ((1 << _BITS) - 1))
            yield (*key, (code & ((1 << _BITS) - 1)) - 1), rows.created[packed == code]
        return
    keys = np.stack([rows.key, rows.fp, rows.site], axis=1)
    distinct, which = np.unique(keys, axis=0, return_inverse=True)
    which = which.reshape(-1)
    for index, (key, fp, site_id) in enumerate(distinct.tolist()):
        yield (key, fp, site_id), rows.created[which == index]


def _trim(group: _Group, low: int) -> None:
    """Forget what every running member has issued, and the oldest past ``ISSUED_KEPT``
    (what is left is one block of rows)."""
    if not group.issued:
        return
    rows = Columns.concat(group.issued)
    keep = rows.seq > max(low, int(rows.seq.max()) - ISSUED_KEPT)
    group.issued = [rows.select(keep)] if keep.any() else []
