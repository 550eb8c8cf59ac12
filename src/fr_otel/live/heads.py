"""One rank's rings read as they grow: the collectives it issued since the last look.

The node agent looks at every local rank twice a second, so a look must cost next to
nothing when nothing happened. ``read_ring`` decodes a whole ring (20,000 slots by
default, tens of milliseconds); here each look reads the ring's record counter (8 bytes)
and only the slots written since, with ``pread``. What slots refer to (groups,
signatures, call sites) is read with ``read_ring`` only when a meta file has grown, which
a running job's rarely do once its first step has interned them.

A rank's record is two rings (``ring.torch_ring_base``): the hooks' (written at the call)
and the torch ring (what only torch's Flight Recorder saw: DDP's buckets, functional
collectives), written by the rank's watch thread at its reads of torch's FR, seconds
apart. Both are followed; ``read_ring``'s merged indexes are used for the torch ring's.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path

from fr_otel.analysis.sqlfiles import VARIABLE_SIZE_OPS
from fr_otel.recorder.ring import (
    COMPLETE_AS_OF,
    COMPLETE_AS_OF_OFFSET,
    HEADER_SIZE,
    META_SUFFIX,
    NEXT_RECORD,
    NEXT_RECORD_OFFSET,
    RING_SUFFIX,
    TORCH_INDEX_OFFSET,
    GroupInfo,
    RankEnd,
    RingContents,
    Signature,
    read_ring,
    torch_ring_base,
)
from fr_otel.recorder.slot import EMPTY, SLOT, SLOT_SIZE
from fr_otel.stacks import call_site

_VARIABLE_SIZE = frozenset(VARIABLE_SIZE_OPS)


@dataclass(kw_only=True, slots=True)
class Head:
    """One collective a rank issued, as the ranks' heads are compared. A value, never
    changed once made; not frozen, which would triple what making one costs (2.8 µs
    against 0.9), and the agent makes one per collective of every local rank."""

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
    """The group's name and members as one string: one name can stand for several groups
    (a mesh's tp groups), and a string keeps its hash where a tuple of 1,024 members
    would be hashed again at every lookup (25 µs each)."""


def fingerprint(signature: Signature) -> Hashable:
    """What the analyzer compares across a group's members (``01_entries.sql``'s ``h``):
    the op, sizes (not for ops whose sizes legitimately differ by rank:
    ``sqlfiles.VARIABLE_SIZE_OPS``), dtypes (for those, the set of dtypes moved). The op is
    the function the user called where the hooks saw it: torch's own name for it (gloo
    runs ``reduce_scatter_tensor`` as ``all_reduce``) is learned by each rank at its own
    next read of torch's FR, so two members would otherwise differ for a few seconds.
    Rings written before the hooks kept the function called name the op only."""
    op = getattr(signature, "api", None) or signature.op
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

    def read(self) -> list[tuple[int, ...]]:
        if not self._open() or self._fd is None:
            return []
        (end,) = NEXT_RECORD.unpack(os.pread(self._fd, NEXT_RECORD.size, NEXT_RECORD_OFFSET))
        self.bytes_read += NEXT_RECORD.size
        if end < self.next:  # a rank that restarted with this number took the file over
            self.next = 0
        start, self.next = max(self.next, end - self._capacity), end
        found: list[tuple[int, ...]] = []
        for first, count in _runs(start, end, self._capacity):
            offset = HEADER_SIZE + (first % self._capacity) * SLOT_SIZE
            data = os.pread(self._fd, count * SLOT_SIZE, offset)
            self.bytes_read += len(data)
            # a slot the writer is reusing for a newer record meanwhile is left out
            found += (
                slot
                for record, slot in enumerate(SLOT.iter_unpack(data), first)
                if slot[0] == record and slot[9] != EMPTY
            )
        return found

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
        self._fingerprints: dict[int, Hashable] = {}
        self._sites: dict[int, str | None] = {}
        self._group_keys: dict[int, str] = {}

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
        self._fingerprints.clear()
        self._group_keys.clear()
        self._sites.clear()
        return contents

    def new_heads(self) -> list[Head]:
        """The collectives issued since the last call (point-to-point ops left out).
        Raises ``OSError`` or ``ValueError`` (``RingFormatError``) for a ring that cannot
        be read."""
        slots = [(cursor.index_offset, slot) for cursor in self._cursors for slot in cursor.read()]
        contents = self._refresh()
        if not slots:
            return []
        if any(
            slot[1] + offset not in contents.groups or slot[4] + offset not in contents.signatures
            for offset, slot in slots
        ):
            # interned after the last read of the meta (the writer appends a line before
            # the first slot that uses it)
            contents = self._refresh(force=True)
        heads = []
        for offset, slot in slots:
            _, group_index, seq, _, sig_index, site_index, peer, created_ns, *_ = slot
            group = contents.groups.get(group_index + offset)
            signature = contents.signatures.get(sig_index + offset)
            if group is None or signature is None or peer >= 0 or signature.is_p2p:
                continue
            heads.append(
                Head(
                    rank=self.rank,
                    group=group.name,
                    seq=seq,
                    fingerprint=self._fingerprint(sig_index + offset, signature),
                    op=getattr(signature, "api", None) or signature.op,
                    # the torch ring's records carry no call site of the user's
                    site=self._site(site_index) if offset == 0 else None,
                    created_ns=created_ns,
                    members=group.ranks,
                    group_key=self._group_key(group_index + offset, group),
                    mirrored=offset != 0,
                    group_desc=group.desc,
                )
            )
        return heads

    @property
    def bytes_read(self) -> int:
        """Bytes of ring slots and counters read so far (the meta files aside)."""
        return sum(cursor.bytes_read for cursor in self._cursors)

    def complete_as_of(self) -> int:
        """Until when every collective the rank issued is known to be in its rings (ns
        since the epoch; 0: not known): what its mirror last wrote into the torch ring
        (``ring.COMPLETE_AS_OF``)."""
        return self._cursors[1].complete_as_of()

    def _fingerprint(self, index: int, signature: Signature) -> Hashable:
        known = self._fingerprints.get(index)
        if known is None:
            known = self._fingerprints[index] = fingerprint(signature)
        return known

    def _group_key(self, index: int, group: GroupInfo) -> str:
        known = self._group_keys.get(index)
        if known is None:
            members = "?" if group.ranks is None else ",".join(map(str, group.ranks))
            known = self._group_keys[index] = f"{group.name}|{members}"
        return known

    def _site(self, index: int) -> str | None:
        if index not in self._sites:
            frames = self.contents.sites.get(index) if self.contents is not None else None
            self._sites[index] = call_site(
                [{"name": n, "filename": f, "line": line} for n, f, line in frames or ()]
            )
        return self._sites[index]

    def close(self) -> None:
        for cursor in self._cursors:
            cursor.close()


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1
