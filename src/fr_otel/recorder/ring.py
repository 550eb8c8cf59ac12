"""The per-rank ring buffer, kept in a memory-mapped file so that it outlives the rank.

A gloo size mismatch kills the receiving rank with ``std::terminate`` on a transport
thread, NCCL's watchdog aborts, an operator's ``kill -9`` ends a stuck rank: none of these
lets Python run a single line. The ring therefore lives in the page cache, not in the
process: every collective is one fixed-size slot written with ``struct.pack_into`` into a
shared mapping of ``rank-NNNNNN.ring``, and what slots refer to (groups, op signatures,
call sites, errors) is appended once, as JSON lines, to ``rank-NNNNNN.meta``. Whoever
reads the files later (a surviving rank, ``fr-otel run``, ``fr-otel import``) gets the
whole buffer of a rank that died without a word.

While its owner lives the ring file is held under an exclusive ``flock``; the kernel drops
the lock when the process dies, which is how survivors tell a dead rank's ring apart from
a live one (a zombie's pid would still answer ``kill(pid, 0)``).

The writer does only what must happen on the training thread: interning (a dict lookup
for anything seen before) and one ``pack_into``.

The module is a little over 800 lines because it is the ring's measured fast paths over one
mapping and its offsets: the hooks' writes, and the watch's reads of the same slots
(``slots``, ``collective_keys``: one ``iter_unpack`` per contiguous run, numpy where
installed, a fraction of a Python loop's watch CPU per collective, which
``benchmarks/recorder_overhead.py`` measures in an all_reduce loop). Reading a dead ring's
files back (``read_ring``) reads the header and meta lines the writer defines.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import mmap
import os
import struct
import threading
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field, replace
from itertools import pairwise
from pathlib import Path
from typing import Any, Final

from fr_otel.recorder.placement import Placement, this_rank
from fr_otel.recorder.slot import (
    DONE,
    DONE_OFFSET,
    EMPTY,
    RECORD_ID,
    RECORD_OF,
    SLOT,
    SLOT_SIZE,
    STARTED,
    STATE_OF,
    STATE_OFFSET,
    slot_dtype,
)

MAGIC: Final = b"FROTRNG1"
_HEADER = struct.Struct("<8sIIq")  # magic, slot size, capacity, created ns
HEADER_SIZE: Final = 64
NEXT_RECORD = struct.Struct("<q")
NEXT_RECORD_OFFSET: Final = 24
"""The header's next record id: the writer's counter lives in the mapping, where the
compiled wrapper (``_fasthook``) advances it without a Python attribute."""
COMPLETE_AS_OF = struct.Struct("<q")
COMPLETE_AS_OF_OFFSET: Final = 32
"""The torch ring's header: the time (ns since the epoch) by which every collective the
rank issued is in its rings, as of the mirror's latest look at torch's counters (0: not
known yet). A reader of a running rank's rings can then tell "not issued" from "not
mirrored yet" (the live check's stalls); the hooks' ring needs none: a hook writes its
slot at the call."""
_STARTED_BYTE = bytes((STARTED,))

RING_SUFFIX: Final = ".ring"
META_SUFFIX: Final = ".meta"


def run_ring_dir(ring_dir: Path, job: str, run_id: str | None = None) -> Path:
    """The folder of one run's rings: ``<ring_dir>/job=<job>/run=<run id>`` (without a
    run id, ``<ring_dir>/job=<job>``). Two launches of one job name share nothing."""
    folder = ring_dir / f"job={job}"
    return folder / f"run={run_id}" if run_id else folder


def ring_base(ring_dir: Path, job: str, rank: int, run_id: str | None = None) -> Path:
    """``<run_ring_dir>/rank-NNNNNN`` (add ``.ring`` or ``.meta``)."""
    return run_ring_dir(ring_dir, job, run_id) / f"rank-{rank:06d}"


TORCH_RING_DIR: Final = "_torch"


def torch_ring_base(base: Path) -> Path:
    """Where the ring of ``base``'s rank holds the ops only torch's Flight Recorder saw
    (``frsource.FrMirror``): ``<run_ring_dir>/_torch/rank-NNNNNN``. Readers of
    ``base`` read it too; ``ring_bases`` does not list it on its own."""
    return base.parent / TORCH_RING_DIR / base.name


TORCH_RECORD_OFFSET: Final = 1 << 40
"""Record ids of the torch ring's records, once merged with the rank's own: one id space
per rank (the archive and the Collector's de-duplication key on it)."""
TORCH_INDEX_OFFSET: Final = 1 << 20
"""The same for the groups and signatures the torch ring interns."""


@dataclass(frozen=True, kw_only=True)
class GroupInfo:
    name: str
    desc: str | None
    ranks: tuple[int, ...] | None
    backend: str | None
    timeout_ms: int | None


@dataclass(frozen=True, kw_only=True)
class Signature:
    """What a collective moved: its op and the shapes and dtypes of its tensors."""

    op: str
    input_sizes: list[list[int]]
    output_sizes: list[list[int]]
    input_dtypes: list[str]
    output_dtypes: list[str]
    is_p2p: bool
    backend: str | None = None
    """The backend that ran it (a group can hold one per device: gloo on CPU, NCCL on GPU)."""
    api: str | None = None
    """The ``torch.distributed`` function the user called, as the hooks saw it; None for an
    op only torch's Flight Recorder saw. ``op`` starts as this too, and becomes torch's
    own name for the op once the FR mirror learns it (``RingWriter.note_torch_op``):
    ``reduce_scatter_tensor`` runs as gloo's ``all_reduce``, and rows the recorder wrote
    meet rows from torch's dumps in one archive, where ops are compared."""


def _with_torch_op(signature: Signature, op: str, backend: str | None) -> Signature:
    """``signature`` as torch's Flight Recorder names its op (``RingWriter.note_torch_op``)."""
    return replace(signature, op=op, backend=backend or signature.backend)


def _reserve(fd: int, size: int) -> None:
    """Allocate ``size`` bytes of disk to ``fd`` (zero-filled). ``OSError`` (ENOSPC...)
    when they cannot be had. Filesystems without ``fallocate`` get the zeros written."""
    try:
        os.posix_fallocate(fd, 0, size)
        return
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
    zeros = bytes(1 << 20)
    written = 0
    while written < size:
        written += os.pwrite(fd, zeros[: min(len(zeros), size - written)], written)


class RingWriter:
    """Append-only view of one rank's ring and meta files, owned by that rank."""

    def __init__(
        self,
        base: Path,
        *,
        capacity: int,
        rank: int,
        world: int,
        job: str,
        backend: str | None,
        run_id: str | None = None,
        hooks: bool = True,
        placement: Placement | None = None,
    ) -> None:
        """``placement``: where the rank runs (default: this process's, ``this_rank``)."""
        base.parent.mkdir(parents=True, exist_ok=True)
        self.placement = placement if placement is not None else this_rank(backend)
        self.base = base
        self.hooks = hooks
        """The hooks write its signatures (their op is the function called: ``api``); the
        torch ring's are torch's own."""
        self.capacity = capacity
        self.rank = rank
        size = HEADER_SIZE + capacity * SLOT_SIZE
        self.world = world
        self.job = job
        self.run_id = run_id
        self.backend = backend
        self._fd = os.open(base.with_suffix(RING_SUFFIX), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            # a rank that restarts with the same number takes its file over
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.ftruncate(self._fd, 0)
            # the blocks are reserved now: on a full disk this fails here, at start, where
            # a sparse file's first write to a new page would kill the rank with SIGBUS
            _reserve(self._fd, size)
            self.mapping = mmap.mmap(self._fd, size)
            """The ring file's shared mapping: the hooks write slots straight into it
            (``slot.SLOT``), the compiled one through ``Core.attach``."""
        except BaseException:
            os.close(self._fd)
            raise
        _HEADER.pack_into(self.mapping, 0, MAGIC, SLOT_SIZE, capacity, time.time_ns())
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
        self._meta = os.open(base.with_suffix(META_SUFFIX), flags, 0o644)
        self._meta_lock = threading.Lock()
        self._final_next_record = 0
        """``next_record`` once the mapping is closed."""
        self.groups: dict[Any, int] = {}
        self.signatures: dict[Any, int] = {}
        self.sites: dict[Any, int] = {}
        self._contents = RingContents(
            base=base,
            rank=rank,
            world=world,
            job=job,
            run=run_id,
            pid=os.getpid(),
            host=self.placement.host,
            local_rank=self.placement.local_rank,
            device=self.placement.device,
            backend=backend,
        )
        self._append(
            {
                "t": "rank",
                "rank": rank,
                "world": world,
                "job": job,
                "run": run_id,
                "pid": os.getpid(),
                "host": self.placement.host,
                "local_rank": self.placement.local_rank,
                "device": self.placement.device,
                "backend": backend,
            }
        )

    @property
    def next_record(self) -> int:
        """The id the next record gets; every record before it was written."""
        try:
            return int(NEXT_RECORD.unpack_from(self.mapping, NEXT_RECORD_OFFSET)[0])
        except ValueError:  # closed at exit
            return self._final_next_record

    @next_record.setter
    def next_record(self, value: int) -> None:
        NEXT_RECORD.pack_into(self.mapping, NEXT_RECORD_OFFSET, value)

    def mark_complete(self, as_of_ns: int) -> None:
        """``COMPLETE_AS_OF``: every collective the rank issued before ``as_of_ns`` is in
        its rings."""
        with contextlib.suppress(ValueError):  # closed at exit
            COMPLETE_AS_OF.pack_into(self.mapping, COMPLETE_AS_OF_OFFSET, as_of_ns)

    def _append(self, item: dict[str, Any]) -> None:
        line = (json.dumps(item, separators=(",", ":")) + "\n").encode()
        with self._meta_lock:
            os.write(self._meta, line)

    def _intern(
        self,
        known: dict[Any, int],
        held: dict[int, Any],
        key: Any,
        value: Any,
        line: dict[str, Any],
    ) -> int:
        """The index of ``key`` in ``known``; a new one is written to the meta file first."""
        index = known.get(key)
        if index is None:
            index = len(known)
            self._append({**line, "i": index})
            held[index] = value
            known[key] = index
        return index

    def intern_group(self, key: Any, info: GroupInfo) -> int:
        line = {
            "t": "group",
            "name": info.name,
            "desc": info.desc,
            "ranks": list(info.ranks) if info.ranks is not None else None,
            "backend": info.backend,
            "timeout_ms": info.timeout_ms,
        }
        return self._intern(self.groups, self._contents.groups, key, info, line)

    def intern_signature(self, key: Any, signature: Signature) -> int:
        if self.hooks and signature.api is None:
            signature = replace(signature, api=signature.op)
        line = {
            "t": "sig",
            "op": signature.op,
            "in": signature.input_sizes,
            "out": signature.output_sizes,
            "in_dt": signature.input_dtypes,
            "out_dt": signature.output_dtypes,
            "p2p": signature.is_p2p,
            "backend": signature.backend,
            "api": signature.api,
        }
        return self._intern(self.signatures, self._contents.signatures, key, signature, line)

    def signature_count(self) -> int:
        """Signatures interned so far: indexes 0 to this, each before any slot refers to it."""
        return len(self._contents.signatures)

    def signature(self, index: int) -> Signature | None:
        """Signature ``index`` as its rows now take it (None before it is interned)."""
        return self._contents.signatures.get(index)

    def note_torch_op(self, index: int, op: str, backend: str | None) -> None:
        """Torch's Flight Recorder names signature ``index``'s op ``backend:op``: its rows
        take that op from now on, and keep the function called as ``api``. Written by the
        watch thread while the hooks write on (the meta file's appends are locked)."""
        signature = self._contents.signatures.get(index)
        if signature is None:
            return
        self._append({"t": "torch_op", "sig": index, "op": op, "backend": backend})
        self._contents.signatures[index] = _with_torch_op(signature, op, backend)

    def group_names(self) -> dict[int, str]:
        """Group index -> the group's name, for every group interned so far."""
        return {index: info.name for index, info in list(self._contents.groups.items())}

    def intern_site(self, key: Any, frames: list[tuple[str, str, int]]) -> int:
        line = {"t": "site", "frames": frames}
        return self._intern(self.sites, self._contents.sites, key, frames, line)

    def begin(
        self,
        group: int,
        seq: int,
        p2p_seq: int,
        signature: int,
        site: int,
        peer: int,
        state: int,
    ) -> int:
        """Write a new slot; return its record id (``finish`` takes it)."""
        record = self.next_record
        SLOT.pack_into(
            self.mapping,
            HEADER_SIZE + (record % self.capacity) * SLOT_SIZE,
            record,
            group,
            seq,
            p2p_seq,
            signature,
            site,
            peer,
            time.time_ns(),
            0,
            state,
        )
        # only now: a reader that sees the new count finds the slot written
        self.next_record = record + 1
        return record

    def append(self, rows: list[tuple[int, ...]]) -> int:
        """Write one slot per row (the slot's fields after the record id); return the
        first record id. For a single writer thread, as ``begin``."""
        first = self.next_record
        pack, target, capacity = SLOT.pack_into, self.mapping, self.capacity
        for record, row in enumerate(rows, first):
            pack(target, HEADER_SIZE + (record % capacity) * SLOT_SIZE, record, *row)
        # only now: a reader that sees the new count finds the slots written
        self.next_record = first + len(rows)
        return first

    def finish(self, record: int, state: int, done_ns: int | None = None) -> None:
        """Mark a record completed or failed, unless the ring has already reused its slot."""
        offset = HEADER_SIZE + (record % self.capacity) * SLOT_SIZE
        done = time.time_ns() if done_ns is None else done_ns
        try:
            if RECORD_ID.unpack_from(self.mapping, offset)[0] == record:
                DONE.pack_into(self.mapping, offset + DONE_OFFSET, done, state)
        except ValueError:  # closed at exit while a callback was still running
            pass

    def note_error(self, record: int, text: str) -> None:
        self._contents.errors[record] = text[:2000]
        self._append({"t": "error", "record": record, "text": text[:2000]})

    def note_flushed(self, incident: str) -> None:
        self._contents.flushed.add(incident)
        self._append({"t": "flushed", "incident": incident})

    def note_gap(self, group: str, first: int, last: int) -> None:
        """Collectives ``first`` to ``last`` of ``group`` were issued but are in neither of
        the rank's rings (torch overwrote them before a read): a reader must not take
        their absence for a skip."""
        gap = Gap(group=group, first=first, last=last)
        self._contents.gaps.append(gap)
        self._append({"t": "gap", "group": group, "first": first, "last": last})

    def note_end(self, how: str, detail: str | None = None) -> None:
        """The rank is ending (``END_KINDS``), after its last read of torch's FR: its rings
        hold everything it issued up to now, so what is absent after its last record was
        never issued. Only the first end counts (a signal's handler may run after an
        exception's)."""
        if self._contents.ended is not None:
            return
        end = RankEnd(how=how, detail=detail, ns=time.time_ns(), records=self.next_record)
        self._contents.ended = end
        self._append(
            {"t": "end", "how": how, "detail": detail, "ns": end.ns, "records": end.records}
        )

    def slots(self, first_record: int = 0, end: int | None = None) -> list[tuple[int, ...]]:
        """The raw slots of records ``first_record`` to ``end`` the ring still holds."""
        end = self.next_record if end is None else end
        start = max(first_record, end - self.capacity, 0)
        found: list[tuple[int, ...]] = []
        for first, count, offset in self._runs(start, end):
            # one iter_unpack per contiguous run; in the usual run every slot holds the
            # record expected there, checked by C loops (map) rather than one per slot
            run = list(SLOT.iter_unpack(self.mapping[offset : offset + count * SLOT_SIZE]))
            records = range(first, first + count)
            if list(map(RECORD_OF, run)) == list(records) and EMPTY not in map(STATE_OF, run):
                found += run
            else:
                found += (
                    s for s, r in zip(run, records, strict=True) if s[0] == r and s[9] != EMPTY
                )
        return found

    def _held(self, first_record: int, end: int) -> Iterator[Any]:
        """Per contiguous run of records ``first_record`` to ``end``, the slots the ring still
        holds: a numpy structured array (``slot_dtype``), or a list of slot tuples where
        numpy is not installed."""
        start = max(first_record, end - self.capacity, 0)
        dtype = slot_dtype()
        for _, count, offset in self._runs(start, end):
            data = self.mapping[offset : offset + count * SLOT_SIZE]  # a copy: hooks write on
            if dtype is None:
                yield [s for s in SLOT.iter_unpack(data) if s[0] >= start and s[9] != EMPTY]
                continue
            import numpy as np

            slots = np.frombuffer(data, dtype)
            yield slots[(slots["record"] >= start) & (slots["state"] != EMPTY)]

    def collective_keys(
        self, first_record: int, end: int
    ) -> dict[int, tuple[range | list[int], list[int]]]:
        """Per group, the collective seqs (a range where they are consecutive, as the hooks
        write them) and the point-to-point ops' own seqs of the records ``first_record`` to
        ``end`` the ring still holds, in record order. The watch asks a few times a second,
        over every record since its last look: the slots are decoded as arrays and each
        group's seqs found in one pass in C (a Python loop over the slots cost the watch
        about as much per record as the hook's write itself, a visible share of a tight
        all_reduce loop's CPU)."""
        listed: dict[int, tuple[list[int], list[int]]] = {}
        arrays: dict[int, tuple[list[Any], list[int]]] = {}
        for held in self._held(first_record, end):
            if isinstance(held, list):
                for s in held:
                    collectives, p2p = listed.setdefault(s[1], ([], []))
                    if s[6] >= 0:
                        p2p.append(s[3])
                    else:
                        collectives.append(s[2])
                continue
            import numpy as np

            p2p_ops = held["peer"] >= 0
            groups = held["group"]
            for group in np.unique(groups).tolist():
                mine = groups == group
                parts, p2p = arrays.setdefault(group, ([], []))
                parts.append(held["seq"][mine & ~p2p_ops])
                p2p += held["p2p_seq"][mine & p2p_ops].tolist()
        found = {group: (_as_range(c), p) for group, (c, p) in listed.items()}
        if arrays:
            import numpy as np

            for group, (parts, p2p) in arrays.items():
                seqs = np.concatenate(parts) if len(parts) > 1 else parts[0]
                consecutive = len(seqs) > 0 and bool((np.diff(seqs) == 1).all())
                found[group] = (
                    range(int(seqs[0]), int(seqs[-1]) + 1) if consecutive else seqs.tolist(),
                    p2p,
                )
        return found

    def signature_keys(
        self, first_record: int, end: int, signatures: Collection[int]
    ) -> list[tuple[int, int, int]]:
        """(group, seq, signature) of the collectives among records ``first_record`` to
        ``end`` the ring still holds whose signature is one of ``signatures`` (the FR
        mirror's, while it learns their torch ops: decoded as arrays, as
        ``collective_keys``)."""
        found: list[tuple[int, int, int]] = []
        for held in self._held(first_record, end):
            if isinstance(held, list):
                found += ((s[1], s[2], s[4]) for s in held if s[6] < 0 and s[4] in signatures)
                continue
            import numpy as np

            wanted = np.fromiter(signatures, np.int32, len(signatures))
            mine = held[(held["peer"] < 0) & np.isin(held["signature"], wanted)]
            found += zip(
                mine["group"].tolist(),
                mine["seq"].tolist(),
                mine["signature"].tolist(),
                strict=True,
            )
        return found

    def _runs(self, first_record: int, end: int) -> Iterator[tuple[int, int, int]]:
        """(first record, count, byte offset) of each contiguous run of slots holding
        records ``first_record`` to ``end`` (two runs where the ring wraps)."""
        record = first_record
        while record < end:
            position = record % self.capacity
            count = min(end - record, self.capacity - position)  # up to the ring's end
            yield record, count, HEADER_SIZE + position * SLOT_SIZE
            record += count

    def started(self, window: int) -> list[tuple[int, int, int]]:
        """(record, group, created ns) of the records still running (``STARTED``) among
        the newest ``window``. The watch asks a few times a second: the states are read as
        one strided slice of the mapping, and only the running slots are unpacked."""
        end = self.next_record
        record = max(end - window, 0)
        found = []
        for first, count, offset in self._runs(record, end):
            states = self.mapping[offset + STATE_OFFSET : offset + count * SLOT_SIZE : SLOT_SIZE]
            index = states.find(_STARTED_BYTE)
            while index >= 0:
                slot = SLOT.unpack_from(self.mapping, offset + index * SLOT_SIZE)
                if slot[0] == first + index and slot[9] == STARTED:
                    found.append((slot[0], slot[1], slot[7]))
                index = states.find(_STARTED_BYTE, index + 1)
        return found

    def snapshot(self, first_record: int = 0, end: int | None = None) -> RingContents:
        """The records from ``first_record`` up to ``end`` (default: all written) that the
        ring still holds, decoded, with what they refer to (from memory: no file reads)."""
        slots = self.slots(first_record, end)
        held = self._contents
        return replace(
            held,
            groups=dict(held.groups),
            signatures=dict(held.signatures),
            sites=dict(held.sites),
            errors=dict(held.errors),
            flushed=set(held.flushed),
            slots=slots,
            gaps=list(held.gaps),
        )

    def sibling(self, base: Path) -> RingWriter:
        """Another ring of this rank (the same capacity and identity) at ``base``, whose
        signatures are not the hooks' (the torch ring's)."""
        return RingWriter(
            base,
            capacity=self.capacity,
            rank=self.rank,
            world=self.world,
            job=self.job,
            backend=self.backend,
            run_id=self.run_id,
            hooks=False,
            placement=self.placement,
        )

    def sync(self) -> None:
        """Push the mapping to the file (only needed if the machine, not the process, dies)."""
        with contextlib.suppress(OSError, ValueError):
            self.mapping.flush()

    def close(self) -> None:
        self._final_next_record = self.next_record
        # BufferError: a compiled hook still holds the mapping (Capture.detach was not
        # called); it stays mapped until the process ends, the file is complete anyway
        with contextlib.suppress(OSError, ValueError, BufferError):
            self.mapping.flush()
            self.mapping.close()
        with contextlib.suppress(OSError):
            os.close(self._meta)
        with contextlib.suppress(OSError):
            os.close(self._fd)


# --- reading ----------------------------------------------------------------------------

END_KINDS: Final = ("exit", "exception", "signal", "abort")
"""How a rank's record can end: the interpreter exiting normally, an exception nobody
caught, a signal that ends it (the launcher's SIGTERM), SIGABRT. A rank killed outright
(SIGKILL, the OOM killer) writes none: its record has no end."""


@dataclass(frozen=True, kw_only=True)
class RankEnd:
    """How and when a rank's record ended (``RingWriter.note_end``)."""

    how: str
    detail: str | None = None
    """The exception's type or the signal's name."""
    ns: int
    records: int
    """Records the rank's own ring held then."""


@dataclass(frozen=True, kw_only=True)
class Gap:
    """Collectives of one group this rank issued that neither of its rings holds."""

    group: str
    """The group's name."""
    first: int
    last: int


@dataclass(kw_only=True)
class RingContents:
    """Everything one rank's files hold, decoded."""

    base: Path
    rank: int
    created_ns: int = 0
    """When the owner opened the ring (its run's start, roughly)."""
    world: int | None = None
    job: str | None = None
    run: str | None = None
    """The run id of the owner's launch (None: written before runs had ids)."""
    pid: int | None = None
    host: str | None = None
    local_rank: int | None = None
    device: str | None = None
    """Where the owner ran (``recorder.placement``); None in rings written before."""
    backend: str | None = None
    groups: dict[int, GroupInfo] = field(default_factory=dict)
    signatures: dict[int, Signature] = field(default_factory=dict)
    sites: dict[int, list[tuple[str, str, int]]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    flushed: set[str] = field(default_factory=set)
    slots: list[tuple[int, ...]] = field(default_factory=list)
    """Decoded slots in record order (record id first, as in the file)."""
    ended: RankEnd | None = None
    """How the rank ended; None while it runs, or when it was killed outright."""
    gaps: list[Gap] = field(default_factory=list)

    def merged(self, torch_ring: RingContents) -> RingContents:
        """These contents and those of the rank's torch ring (``torch_ring_base``), as
        one: the torch ring's record ids, groups and signatures moved past this ring's."""
        records, indexes = TORCH_RECORD_OFFSET, TORCH_INDEX_OFFSET
        moved = [
            (s[0] + records, s[1] + indexes, *s[2:4], s[4] + indexes, *s[5:])
            for s in torch_ring.slots
        ]
        return replace(
            self,
            groups={**self.groups, **{i + indexes: g for i, g in torch_ring.groups.items()}},
            signatures={
                **self.signatures,
                **{i + indexes: s for i, s in torch_ring.signatures.items()},
            },
            sites=self.sites,
            errors={**self.errors, **{r + records: e for r, e in torch_ring.errors.items()}},
            flushed=self.flushed | torch_ring.flushed,
            slots=self.slots + moved,
            ended=self.ended or torch_ring.ended,
            gaps=self.gaps + torch_ring.gaps,
        )


class RingFormatError(ValueError):
    """A ring or meta file that is not ours or is cut short."""


def _read_meta(path: Path, contents: RingContents) -> None:
    torn = 0
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                item = json.loads(raw)
            except ValueError:
                # the owner may die in the middle of one line; survivors append after it
                torn += 1
                if torn > 1:
                    raise RingFormatError(f"{path}: line {number} is not JSON") from None
                continue
            kind = item.get("t")
            if kind == "rank":
                contents.world = item.get("world")
                contents.job = item.get("job")
                contents.run = item.get("run")
                contents.pid = item.get("pid")
                contents.host = item.get("host")
                contents.local_rank = item.get("local_rank")
                contents.device = item.get("device")
                contents.backend = item.get("backend")
            elif kind == "group":
                ranks = item.get("ranks")
                contents.groups[item["i"]] = GroupInfo(
                    name=item["name"],
                    desc=item.get("desc"),
                    ranks=tuple(ranks) if ranks is not None else None,
                    backend=item.get("backend"),
                    timeout_ms=item.get("timeout_ms"),
                )
            elif kind == "sig":
                contents.signatures[item["i"]] = Signature(
                    op=item["op"],
                    input_sizes=item["in"],
                    output_sizes=item["out"],
                    input_dtypes=item["in_dt"],
                    output_dtypes=item["out_dt"],
                    is_p2p=item["p2p"],
                    backend=item.get("backend"),
                    api=item.get("api"),
                )
            elif kind == "torch_op" and item.get("sig") in contents.signatures:
                index = item["sig"]
                contents.signatures[index] = _with_torch_op(
                    contents.signatures[index], item["op"], item.get("backend")
                )
            elif kind == "site":
                contents.sites[item["i"]] = [tuple(f) for f in item["frames"]]
            elif kind == "error":
                contents.errors[item["record"]] = item["text"]
            elif kind == "flushed":
                contents.flushed.add(item["incident"])
            elif kind == "gap":
                contents.gaps.append(
                    Gap(group=item["group"], first=item["first"], last=item["last"])
                )
            elif kind == "end" and contents.ended is None:
                contents.ended = RankEnd(
                    how=item["how"],
                    detail=item.get("detail"),
                    ns=item["ns"],
                    records=item["records"],
                )


def read_ring(base: Path, rank: int | None = None, *, slots: bool = True) -> RingContents:
    """Decode ``<base>.ring`` and ``<base>.meta``. Raises ``RingFormatError`` or ``OSError``.
    ``slots=False``: the meta alone (and the header), for a reader that follows the slots
    itself: decoding a ring of 20,000 slots costs tens of milliseconds."""
    ring = base.with_suffix(RING_SUFFIX)
    if slots:
        data = ring.read_bytes()
        size = len(data)
    else:
        with ring.open("rb") as handle:
            data = handle.read(HEADER_SIZE)
            size = os.fstat(handle.fileno()).st_size
    if len(data) < HEADER_SIZE or data[:8] != MAGIC:
        raise RingFormatError(f"{ring}: not an fr_otel ring file")
    _, slot_size, capacity, created_ns = _HEADER.unpack_from(data, 0)
    if slot_size != SLOT_SIZE or size < HEADER_SIZE + capacity * SLOT_SIZE:
        raise RingFormatError(f"{ring}: truncated or written by another fr_otel version")
    if rank is None:
        rank = int(base.name.removeprefix("rank-"))
    contents = RingContents(base=base, rank=rank, created_ns=created_ns)
    _read_meta(base.with_suffix(META_SUFFIX), contents)
    if slots:
        contents.slots = sorted(
            slot
            for slot in SLOT.iter_unpack(data[HEADER_SIZE : HEADER_SIZE + capacity * SLOT_SIZE])
            if slot[9] != EMPTY
        )
    companion = torch_ring_base(base)
    if companion.with_suffix(RING_SUFFIX).exists() and base.parent.name != TORCH_RING_DIR:
        contents = contents.merged(read_ring(companion, rank, slots=slots))
    return contents


def ring_bases(ring_dir: Path, job: str | None = None) -> Iterator[Path]:
    """Every ring under ``ring_dir`` (one job's, or all; of every run), as bases without
    suffix."""
    jobs = f"job={job}" if job else "job=*"
    for pattern in (f"{jobs}/rank-*{RING_SUFFIX}", f"{jobs}/run=*/rank-*{RING_SUFFIX}"):
        for path in sorted(ring_dir.glob(pattern)):
            yield path.with_suffix("")


def run_ring_bases(ring_dir: Path, job: str, run_id: str | None) -> Iterator[Path]:
    """The rings of one run (``run_ring_dir``), as bases without suffix."""
    for path in sorted(run_ring_dir(ring_dir, job, run_id).glob(f"rank-*{RING_SUFFIX}")):
        yield path.with_suffix("")


@contextlib.contextmanager
def adopted(base: Path) -> Iterator[bool]:
    """Hold a dead rank's ring for flushing: yields False when its owner is alive or
    someone else holds it (both take the file's lock)."""
    try:
        fd = os.open(base.with_suffix(RING_SUFFIX), os.O_RDONLY)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def append_flushed(base: Path, incident: str) -> None:
    """Record, in a dead rank's meta file, that its buffer went out under ``incident``."""
    line = json.dumps({"t": "flushed", "incident": incident}, separators=(",", ":")) + "\n"
    fd = os.open(base.with_suffix(META_SUFFIX), os.O_RDWR | os.O_APPEND)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = "\n" + line  # the owner died mid-line: keep ours apart from it
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _as_range(seqs: list[int]) -> range | list[int]:
    """``seqs`` as a range where they are consecutive and increasing."""
    if seqs and seqs[-1] - seqs[0] == len(seqs) - 1 and all(b == a + 1 for a, b in pairwise(seqs)):
        return range(seqs[0], seqs[-1] + 1)
    return seqs
