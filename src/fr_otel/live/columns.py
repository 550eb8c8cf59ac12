"""A look's new collectives as columns: what the board and the stall watch take in bulk.

A tight loop of small collectives issues thousands a second per rank, and an object made
and placed for each would cost the agent far more per collective than array operations
do. So each rank's new slots are decoded as numpy arrays, and what the ranks intern
separately (a group, a signature, a call site) becomes one small integer per distinct
value on this host (``Ids``), so that members are compared with array operations; a
``Head`` is made only for a collective the agent reports (a candidate, a stall).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

UNKNOWN = -1
"""A site id where the call site is not known (the torch ring's records)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupKey:
    """A group as the agent tells groups apart: its name and its members."""

    key: str
    """``Head.group_key``."""
    name: str
    desc: str | None
    members: tuple[int, ...] | None


class Ids:
    """One integer per distinct group, fingerprint and call site, shared by every rank the
    agent reads: equal values on two ranks get equal ids."""

    def __init__(self) -> None:
        self._groups: dict[str, int] = {}
        self.groups: list[GroupKey] = []
        self._fingerprints: dict[Hashable, int] = {}
        self.fingerprints: list[Hashable] = []
        self.ops: list[str] = []
        self._sites: dict[str, int] = {}
        self.sites: list[str] = []

    def group(self, group: GroupKey) -> int:
        known = self._groups.get(group.key)
        if known is None:
            known = self._groups[group.key] = len(self.groups)
            self.groups.append(group)
        return known

    def group_of(self, key: str) -> int | None:
        return self._groups.get(key)

    def fingerprint(self, fingerprint: Hashable, op: str) -> int:
        known = self._fingerprints.get(fingerprint)
        if known is None:
            known = self._fingerprints[fingerprint] = len(self.fingerprints)
            self.fingerprints.append(fingerprint)
            self.ops.append(op)
        return known

    def site(self, site: str | None) -> int:
        if site is None:
            return UNKNOWN
        known = self._sites.get(site)
        if known is None:
            known = self._sites[site] = len(self.sites)
            self.sites.append(site)
        return known


@dataclass(frozen=True, kw_only=True, slots=True)
class Columns:
    """Collectives, one row each (int64 arrays but ``mirrored``, bool)."""

    rank: Any
    key: Any
    """The group's id (``Ids.group``)."""
    seq: Any
    fp: Any
    """The fingerprint's id (``Ids.fingerprint``)."""
    site: Any
    """The call site's id (``UNKNOWN``: not known)."""
    created: Any
    mirrored: Any

    def __len__(self) -> int:
        return len(self.seq)

    def select(self, which: Any) -> Columns:
        """The rows a boolean mask or an index array picks."""
        return Columns(**{name: getattr(self, name)[which] for name in _COLUMNS})

    @staticmethod
    def concat(parts: Sequence[Columns]) -> Columns:
        if len(parts) == 1:
            return parts[0]
        return Columns(
            **{name: np.concatenate([getattr(p, name) for p in parts]) for name in _COLUMNS}
        )

    def by_group(self) -> Iterable[tuple[int, Columns]]:
        """(group id, its rows), each group once."""
        yield from _split(self, self.key)

    def by_rank(self) -> Iterable[tuple[int, Columns]]:
        """(rank, its rows), each rank once."""
        yield from _split(self, self.rank)


_COLUMNS = tuple(column.name for column in fields(Columns))


def groups_of(looked: Iterable[Columns]) -> Iterator[tuple[int, Columns]]:
    """(group id, its rows) of every look's rows, each rank's look group by group."""
    for rows in looked:
        if len(rows):
            yield from rows.by_group()


def note_reached(reached: dict[int, int], rows: Columns) -> None:
    """Each rank's newest seq in ``rows`` into ``reached`` (rank -> its newest seq)."""
    for rank, its in rows.by_rank():
        newest = int(its.seq.max())
        reached[rank] = max(reached.get(rank, newest), newest)


def _split(rows: Columns, column: Any) -> Iterable[tuple[int, Columns]]:
    if not len(column):
        return
    if column.min() == column.max():  # the usual case: no sort
        yield int(column[0]), rows
        return
    for value in np.unique(column).tolist():
        yield value, rows.select(column == value)


def empty() -> Columns:
    none = np.empty(0, np.int64)
    return Columns(
        rank=none,
        key=none,
        seq=none,
        fp=none,
        site=none,
        created=none,
        mirrored=np.empty(0, bool),
    )
