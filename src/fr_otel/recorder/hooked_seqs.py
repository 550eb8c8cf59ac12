"""The seqs of one group's collectives the hooks recorded, as the FR mirror asks about them.

The mirror notes every hooked op to tell which of torch's FR entries the hooks missed,
a few times a second over every record since its last look. Collectives the hooks see
come with consecutive seqs, so they are kept as one run while they do: noting a look's
collectives and asking whether a span of seqs was hooked then cost a comparison, not a
tuple and a set insertion per collective (most of the watch thread's CPU in a tight
all_reduce loop). Point-to-point ops, and collectives that do not continue the run (the
hooks missed some: DDP's buckets), are kept one by one.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat

Key = tuple[bool, int]
"""(is p2p, seq): a collective's seq, or a point-to-point op's own."""


class HookedSeqs:
    """One group's hooked ops (see the module's docstring)."""

    __slots__ = ("others", "run")

    def __init__(self) -> None:
        self.run = range(0)
        """Consecutive collective seqs, all hooked."""
        self.others: set[Key] = set()

    def add(self, collectives: range | list[int], p2p: Iterable[int] = ()) -> None:
        """Note collectives (a range where they are consecutive) and p2p ops by seq."""
        if isinstance(collectives, range) and collectives:
            run = self.run
            if collectives.start == run.stop and run:
                self.run = range(run.start, collectives.stop)
            elif run.start <= collectives.start and collectives.stop <= run.stop:
                pass
            elif len(collectives) > len(run):  # the longer run is kept as the run
                self.others.update((False, seq) for seq in run if seq not in collectives)
                self.others.difference_update(zip(repeat(False), collectives))
                self.run = collectives
            else:
                self._add_others(collectives)
        else:
            self._add_others(collectives)
        self.others.update(zip(repeat(True), p2p))

    def _add_others(self, collectives: Iterable[int]) -> None:
        run = self.run
        self.others.update((False, seq) for seq in collectives if seq not in run)

    def __contains__(self, key: Key) -> bool:
        p2p, seq = key
        return (not p2p and seq in self.run) or key in self.others

    def covers(self, first: int, last: int) -> bool:
        """Whether every collective seq from ``first`` to ``last`` was hooked."""
        if self.run.start <= first and last < self.run.stop:
            return True
        return all(seq in self.run or (False, seq) in self.others for seq in range(first, last + 1))

    def collective_seqs(self) -> set[int]:
        return set(self.run) | {seq for p2p, seq in self.others if not p2p}

    def forget_before(self, seq: int) -> None:
        """Forget the ops before ``seq`` (their own seq)."""
        self.run = range(max(self.run.start, seq), max(self.run.stop, seq))
        self.others = {key for key in self.others if key[1] >= seq}

    def __len__(self) -> int:
        return len(self.run) + len(self.others)
