"""One rank's rings read as they grow: the collectives it issued since the last look.

The node agent looks at every local rank once a second, so a look must cost next to
nothing when nothing happened. ``read_ring`` decodes a whole ring (20,000 slots by
default, tens of milliseconds); here each look reads the ring's record counter (8 bytes)
and only the slots written since, with ``pread``. What slots refer to (groups,
signatures, call sites) is read with ``read_ring`` only when a meta file has grown, which
a running job's rarely do once its first step has interned them. The slots come as
columns (``columns``): decoded with numpy, their indexes turned into the host's ids by
one array lookup per ring.

A rank's record is two rings (``ring.torch_ring_base``): the hooks' (written at the call)
and the torch ring (what only torch's Flight Recorder saw: DDP's buckets, functional
collectives), written by the rank's watch thread at its reads of torch's FR, seconds
apart. Both are followed; ``read_ring``'s merged indexes are used for the torch ring's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fr_otel.analysis.sqlfiles import VARIABLE_SIZE_OPS
from fr_otel.live.columns import UNKNOWN, Columns, GroupKey, Ids, empty
from fr_otel.recorder.ring import (
    COMPLETE_AS_OF,
    COMPLETE_AS_OF_OFFSET,
    HEADER_SIZE,
    META_SUFFIX,
    NEXT_RECORD,
    NEXT_RECORD_OFFSET,
    RING_SUFFIX,
    TORCH_INDEX_OFFSET,
    RankEnd,
    RingContents,
    Signature,
    read_ring,
    torch_ring_base,
)
from fr_otel.recorder.slot import EMPTY, SLOT_SIZE, slot_dtype
from fr_otel.stacks import call_site

_VARIABLE_SIZE = frozenset(VARIABLE_SIZE_OPS)


@dataclass(kw_only=True, slots=True)
class Head:
    """One collective a rank issued, as the agent reports it (a candidate's, a stall's):
    made only for those; the looks compare columns (``columns``)."""

    rank: int
    group: str
    """The group's name: one name for the group on every member (torch's)."""
    seq: int
    fingerprint: Hashable
    """What must agree across the group (``fingerprint``)."""
    op: str
    site: str | None
    """The user's call site (``file:line in function``); None where unknown (the torch
    ring's records)."""
    created_ns: int
    members: tuple[int, ...] | None
    """The group's global ranks, as the rank's meta names them."""
    group_desc: str | None = None
    """The group's description (torch's ``group_desc``), as the rank's meta names it."""
    mirrored: bool = False
    """From the torch ring: in the rank's rings only since its last read of torch's FR."""
    group_key: str
    """The group's name and members as one string (``group_key``): one name can stand for
    several groups (a mesh's tp groups)."""


def fingerprint(signature: Signature) -> Hashable:
    """What the analyzer compares across a group's members (``01_entries.sql``'s ``h``):
    the op, sizes (not for ops whose sizes legitimately differ by rank:
    ``sqlfiles.VARIABLE_SIZE_OPS``), dtypes (for those, the set of dtypes moved). The op is
    the function the user called where the hooks saw it: torch's own name for it (gloo
    runs ``reduce_scatter_tensor`` as ``all_reduce``) is learned by each rank at its own
    next read of torch's FR, so two members would otherwise differ for a few seconds.
    Rings written before the hooks kept the function called name the op only."""
    op = called_op(signature)
    if op in _VARIABLE_SIZE or signature.op in _VARIABLE_SIZE:
        moved = tuple(sorted({*signature.input_dtypes, *signature.output_dtypes}))
        return (op, moved)
    return (
        op,
        repr(signature.input_sizes),
        repr(signature.output_sizes),
        tuple(signature.input_dtypes),
        tuple(signature.output_dtypes),
    )


def called_op(signature: Signature) -> str:
    """The function the user called where the hooks saw it, else torch's op."""
    return getattr(signature, "api", None) or signature.op


class _Cursor:
    """The slots of one ring file written since the last read."""

    def __init__(self, path: Path, index_offset: int) -> None:
        self.path = path
        self.index_offset = index_offset
        """Added to group and signature indexes: the torch ring's, as ``read_ring`` merges."""
        self.next = 0
        self._fd: int | None = None
        self._capacity = 0
        self.bytes_read = 0

    def _open(self) -> bool:
        if self._fd is not None:
            return True
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return False  # not made yet (the torch ring starts with the mirror)
        capacity = (os.fstat(fd).st_size - HEADER_SIZE) // SLOT_SIZE
        if capacity <= 0:
            os.close(fd)
            return False
        self._fd, self._capacity = fd, capacity
        return True

    def read(self) -> Any:
        """The slots written since the last read, as a numpy structured array
        (``slot.slot_dtype``)."""
        dtype = slot_dtype()
        if not self._open() or self._fd is None:
            return np.empty(0, dtype)
        (end,) = NEXT_RECORD.unpack(os.pread(self._fd, NEXT_RECORD.size, NEXT_RECORD_OFFSET))
        self.bytes_read += NEXT_RECORD.size
        if end < self.next:  # a rank that restarted with this number took the file over
            self.next = 0
        start, self.next = max(self.next, end - self._capacity), end
        found = []
        for first, count in _runs(start, end, self._capacity):
            offset = HEADER_SIZE + (first % self._capacity) * SLOT_SIZE
            data = os.pread(self._fd, count * SLOT_SIZE, offset)
            self.bytes_read += len(data)
            slots = np.frombuffer(data, dtype, len(data) // SLOT_SIZE)
            # a slot the writer is reusing for a newer record meanwhile is left out
            expected = np.arange(first, first + len(slots), dtype=np.int64)
            found.append(slots[(slots["record"] == expected) & (slots["state"] != EMPTY)])
        if not found:
            return np.empty(0, dtype)
        return np.concatenate(found) if len(found) > 1 else found[0]

    def complete_as_of(self) -> int:
        """The ring's ``COMPLETE_AS_OF`` (0: not known, or no ring yet)."""
        if not self._open() or self._fd is None:
            return 0
        try:
            data = os.pread(self._fd, COMPLETE_AS_OF.size, COMPLETE_AS_OF_OFFSET)
        except OSError:
            return 0
        return int(COMPLETE_AS_OF.unpack(data)[0]) if len(data) == COMPLETE_AS_OF.size else 0

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _runs(start: int, end: int, capacity: int) -> Iterator[tuple[int, int]]:
    """(first record, count) of each contiguous run of slots (two where the ring wraps)."""
    record = start
    while record < end:
        count = min(end - record, capacity - record % capacity)
        yield record, count
        record += count


class RankRings:
    """One rank's two rings, followed (see the module's docstring)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.rank = int(base.name.removeprefix("rank-"))
        torch_base = torch_ring_base(base)
        self._cursors = (
            _Cursor(base.with_suffix(RING_SUFFIX), 0),
            _Cursor(torch_base.with_suffix(RING_SUFFIX), TORCH_INDEX_OFFSET),
        )
        self._metas = (base.with_suffix(META_SUFFIX), torch_base.with_suffix(META_SUFFIX))
        self._meta_sizes: tuple[int, ...] = ()
        self.contents: RingContents | None = None
        """The rank's meta (``read_ring``), as of the last time a meta file grew."""
        self._ids: Ids | None = None
        self._lookups: dict[int, _Lookup] = {}
        """Per ring (its index offset): its indexes as the ids of ``Ids``, as of
        ``contents``."""

    @property
    def ended(self) -> RankEnd | None:
        return self.contents.ended if self.contents is not None else None

    def _refresh(self, force: bool = False) -> RingContents:
        sizes = tuple(_size(path) for path in self._metas)
        if self.contents is not None and sizes == self._meta_sizes and not force:
            return self.contents
        # the meta alone: the cursors read the slots
        contents = read_ring(self.base, self.rank, slots=False)
        self.contents, self._meta_sizes = contents, sizes
        self._lookups.clear()
        return contents

    def new_columns(self, ids: Ids) -> Columns:
        """The collectives issued since the last call (point-to-point ops left out), their
        groups, fingerprints and sites as ``ids``' (one ``Ids`` for every rank read).
        Raises ``OSError`` or ``ValueError`` (``RingFormatError``) for a ring that cannot
        be read."""
        if self._ids is not ids:
            self._ids = ids
            self._lookups.clear()
        read = [(cursor.index_offset, cursor.read()) for cursor in self._cursors]
        self._refresh()
        parts = []
        for offset, slots in read:
            slots = slots[slots["peer"] < 0]
            if not len(slots):
                continue
            lookup = self._lookup(offset, ids)
            groups, fps = lookup.ids_of(slots)
            if (groups == _NOT_KNOWN).any() or (fps == _NOT_KNOWN).any():
                # interned after the last read of the meta (the writer appends a line
                # before the first slot that uses it)
                self._refresh(force=True)
                lookup = self._lookup(offset, ids)
                groups, fps = lookup.ids_of(slots)
            parts.append(lookup.columns(self.rank, slots, groups, fps, mirrored=offset != 0))
        return Columns.concat(parts) if parts else empty()

    def new_heads(self, ids: Ids | None = None) -> list[Head]:
        """``new_columns`` as heads, one by one."""
        ids = ids if ids is not None else self._ids or Ids()
        rows = self.new_columns(ids)
        return [head_at(ids, rows, row) for row in range(len(rows))]

    def _lookup(self, offset: int, ids: Ids) -> _Lookup:
        known = self._lookups.get(offset)
        if known is None:
            assert self.contents is not None
            known = self._lookups[offset] = _Lookup.of(self.contents, offset, ids)
        return known

    @property
    def bytes_read(self) -> int:
        """Bytes of ring slots and counters read so far (the meta files aside)."""
        return sum(cursor.bytes_read for cursor in self._cursors)

    def complete_as_of(self) -> int:
        """Until when every collective the rank issued is known to be in its rings (ns
        since the epoch; 0: not known): what its mirror last wrote into the torch ring
        (``ring.COMPLETE_AS_OF``)."""
        return self._cursors[1].complete_as_of()

    def close(self) -> None:
        for cursor in self._cursors:
            cursor.close()


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


_NOT_KNOWN = -2
"""An index the meta does not name (yet)."""
_LEFT_OUT = -3
"""A signature of a point-to-point op: not compared."""


def _table(known: dict[int, int]) -> Any:
    table = np.full(max(known, default=-1) + 1, _NOT_KNOWN, np.int64)
    for index, value in known.items():
        table[index] = value
    return table


def _at(table: Any, indexes: Any) -> Any:
    inside = (indexes >= 0) & (indexes < len(table))
    return np.where(inside, table[np.where(inside, indexes, 0)] if len(table) else 0, _NOT_KNOWN)


@dataclass(frozen=True, kw_only=True, slots=True)
class _Lookup:
    """One ring's group, signature and site indexes as ids of ``Ids`` (arrays indexed by
    the slot's own index)."""

    groups: Any
    fingerprints: Any
    sites: Any | None
    """None: the ring's records carry no call site of the user's (the torch ring)."""

    @staticmethod
    def of(contents: RingContents, offset: int, ids: Ids) -> _Lookup:
        top = offset + TORCH_INDEX_OFFSET if offset == 0 else float("inf")

        def mine(index: int) -> bool:
            return offset <= index < top

        groups = {
            index - offset: ids.group(
                GroupKey(
                    key=group_key(group.name, group.ranks),
                    name=group.name,
                    desc=group.desc,
                    members=group.ranks,
                )
            )
            for index, group in contents.groups.items()
            if mine(index)
        }
        fingerprints = {
            index - offset: (
                _LEFT_OUT
                if signature.is_p2p
                else ids.fingerprint(fingerprint(signature), called_op(signature))
            )
            for index, signature in contents.signatures.items()
            if mine(index)
        }
        sites = None
        if offset == 0:
            sites = {
                index: ids.site(
                    call_site([{"name": n, "filename": f, "line": line} for n, f, line in frames])
                )
                for index, frames in contents.sites.items()
            }
        return _Lookup(
            groups=_table(groups),
            fingerprints=_table(fingerprints),
            sites=_table(sites) if sites is not None else None,
        )

    def ids_of(self, slots: Any) -> tuple[Any, Any]:
        """Each slot's group and fingerprint ids (``_NOT_KNOWN`` where the meta does not
        name its index, ``_LEFT_OUT`` for a point-to-point signature)."""
        return _at(self.groups, slots["group"]), _at(self.fingerprints, slots["signature"])

    def columns(self, rank: int, slots: Any, groups: Any, fps: Any, *, mirrored: bool) -> Columns:
        """The slots as rows, given their ``ids_of``."""
        keep = (groups >= 0) & (fps >= 0)  # unnamed even after a read of the meta: left out
        if not keep.all():
            slots, groups, fps = slots[keep], groups[keep], fps[keep]
        if self.sites is None:
            sites = np.full(len(slots), UNKNOWN, np.int64)
        else:
            sites = _at(self.sites, slots["site"])
            sites[sites < 0] = UNKNOWN
        return Columns(
            rank=np.full(len(slots), rank, np.int64),
            key=groups,
            seq=slots["seq"].astype(np.int64),
            fp=fps,
            site=sites,
            created=slots["created_ns"].astype(np.int64),
            mirrored=np.full(len(slots), mirrored, bool),
        )


def group_key(name: str, members: tuple[int, ...] | None) -> str:
    """A group's name and members as one string (``Head.group_key``)."""
    return f"{name}|{'?' if members is None else ','.join(map(str, members))}"


def head_at(ids: Ids, rows: Columns, row: int) -> Head:
    """Row ``row`` of ``rows`` as a ``Head``."""
    group = ids.groups[int(rows.key[row])]
    fp = int(rows.fp[row])
    site = int(rows.site[row])
    return Head(
        rank=int(rows.rank[row]),
        group=group.name,
        seq=int(rows.seq[row]),
        fingerprint=ids.fingerprints[fp],
        op=ids.ops[fp],
        site=ids.sites[site] if site != UNKNOWN else None,
        created_ns=int(rows.created[row]),
        members=group.members,
        group_desc=group.desc,
        mirrored=bool(rows.mirrored[row]),
        group_key=group.key,
    )


def columns_of(heads: Iterable[Head], ids: Ids) -> Columns:
    """Heads made one by one (the tests'), as columns."""
    rows = [
        (
            head.rank,
            ids.group(
                GroupKey(
                    key=head.group_key,
                    name=head.group,
                    desc=head.group_desc,
                    members=head.members,
                )
            ),
            head.seq,
            ids.fingerprint(head.fingerprint, head.op),
            ids.site(head.site),
            head.created_ns,
            head.mirrored,
        )
        for head in heads
    ]
    if not rows:
        return empty()
    rank, key, seq, fp, site, created, mirrored = zip(*rows, strict=True)
    return Columns(
        rank=np.array(rank, np.int64),
        key=np.array(key, np.int64),
        seq=np.array(seq, np.int64),
        fp=np.array(fp, np.int64),
        site=np.array(site, np.int64),
        created=np.array(created, np.int64),
        mirrored=np.array(mirrored, bool),
    )
