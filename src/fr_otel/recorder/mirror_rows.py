"""The torch ring's rows: what the mirror of torch's Flight Recorder (``frsource.FrMirror``)
writes for the FR entries the hooks did not record, at each read. Torch's buffer is in
record order, so a read's new entries are a tail, turned into Python values column by
column; each distinct group (per timeout) and signature is interned in the ring once. Ops
still running at a read are kept pending, finished when a later read finds them completed
(or called overdue by the mirror), and the collectives torch overwrote before a read are
noted as lost, so that no reader takes them for skipped.
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from itertools import groupby
from typing import TYPE_CHECKING, Any

from fr_otel.recorder.hooked_seqs import HookedSeqs
from fr_otel.recorder.mirror_stats import MirrorStats
from fr_otel.recorder.ring import GroupInfo, RingWriter, Signature
from fr_otel.recorder.slot import COMPLETED, SCHEDULED, STARTED
from fr_otel.recorder.torch_fr import (
    encoded_rows,
    first_items,
    in_record_order,
    signature_keys,
)

if TYPE_CHECKING:  # pyarrow is imported where entries are read: not at install
    import pyarrow as pa

DETECTION_SHARE = 0.75
"""By default an op is overdue at this share of its group's timeout: the rank declares and
flushes before torch's own timeout ends the op (and, with NCCL, the process)."""


def detection_timeout_ns(group_timeout_ns: int, setting_s: float | None) -> int:
    """When an op counts as overdue: ``FR_OTEL_TIMEOUT`` if set, else a share of the
    group's own timeout (0 when neither is known: never)."""
    if setting_s is not None:
        return int(setting_s * 1e9)
    return int(group_timeout_ns * DETECTION_SHARE)


def _runs(values: list[int]) -> Iterator[tuple[int, int]]:
    """(first, last) of each run of consecutive values in sorted ``values``."""
    for _, run in groupby(enumerate(values), lambda pair: pair[1] - pair[0]):
        items = [value for _, value in run]
        yield items[0], items[-1]


def _is_gloo(profiling_name: str | None) -> bool:
    return str(profiling_name or "").startswith("gloo:")


def _fr_state(state: str | None, retired: bool | None, gloo: bool) -> int:
    """A slot state for an FR entry: NCCL's own, gloo's ``retired`` (its only completion
    signal: gloo never discovers start or completion)."""
    if state == "completed" or (retired and state == "scheduled"):
        return COMPLETED
    if state == "started":
        return STARTED
    return STARTED if gloo else SCHEDULED


@dataclass
class _Pending:
    record: int
    created_ns: int
    timeout_ns: int


class MirrorRows:
    """Writes the torch ring's rows for torch's FR entries. Called from the watch thread,
    at the mirror's reads."""

    def __init__(
        self,
        *,
        ring: RingWriter,
        stats: MirrorStats,
        hooked: dict[str, HookedSeqs],
        groups: Callable[[], dict[str, Any]],
        describe: Callable[[Any], tuple[GroupInfo, int]],
        timeout_s: float | None,
    ) -> None:
        self.ring = ring
        self.stats = stats
        self._hooked = hooked
        """Group name -> the ops the hooks recorded (the mirror's, which keeps it current):
        their FR entries are not mirrored."""
        self._groups = groups
        """Group name -> process group object (torch's registry)."""
        self._describe = describe
        """Process group -> (its GroupInfo, its own timeout in ns)."""
        self._timeout_s = timeout_s
        self._last_fr_record: dict[str, int] = {}
        """Per FR source, the newest record id read."""
        self.pending: dict[tuple[str, int], _Pending] = {}
        """(FR source, record id) -> the torch ring's record of an op still running at the
        last read."""
        self._group_index: dict[str, tuple[int, int | None, int]] = {}
        """Group name -> (the torch ring's group, its timeout in ms, the FR record that
        said so): the newest timeout each group ran under."""
        self._group_timeout: dict[str, int] = {}
        self._signatures: dict[Any, int] = {}
        self._names: dict[str, tuple[str | None, str]] = {}
        """FR profiling name -> (backend, op)."""
        self.shortest_timeout_ns = 0

    def take(self, source: str, entries: pa.StructArray) -> None:
        """Mirror the entries newer than the last read, and finish the ops that were
        still running then. Torch's buffer is in record order: the new ones are a tail,
        and only that tail is turned into Python values, column by column."""
        entries, records = in_record_order(entries)
        last = self._last_fr_record.get(source, -1)
        if records and last >= 0 and records[0] > last + 1:
            self.stats.missed += records[0] - last - 1
        self._finish_pending(source, entries, records)
        start = bisect_right(records, last)
        if start == len(records):
            return
        new = entries.slice(start) if start else entries
        rows, running = self._rows(new, records[start:])
        if rows:
            first = self.ring.append(rows)
            for offset, key, pending in running:
                pending.record = first + offset
                self.pending[(source, key)] = pending
            self.stats.mirrored += len(rows)
        self._last_fr_record[source] = max(last, records[-1])

    def note_gaps(
        self,
        counters: dict[str, int],
        dumps: Iterable[pa.StructArray],
        read_upto: dict[str, int],
    ) -> None:
        """Torch overwrote entries before this read: note, per group, the collectives
        issued since the last read that neither ring holds (the hooks did not record them,
        this dump no longer has them), so that no reader takes them for skipped."""
        held: dict[str, set[int]] = {}
        for entries in dumps:
            column = entries.field
            names = first_items(column("process_group")).to_pylist()
            for name, seq, p2p in zip(
                names,
                column("collective_seq_id").to_pylist(),
                column("is_p2p").to_pylist(),
                strict=True,
            ):
                if not p2p and seq is not None:
                    held.setdefault(str(name), set()).add(seq)
        for name, count in counters.items():
            start = read_upto.get(name, 0) + 1
            if count < start:
                continue
            seqs = self._hooked.get(name)
            hooked = seqs.collective_seqs() if seqs is not None else set()
            lost = set(range(start, count + 1)) - hooked - held.get(name, set())
            for first, last in _runs(sorted(lost)):
                self.ring.note_gap(name, first, last)
                self.stats.gaps += 1

    def _finish_pending(self, source: str, entries: pa.StructArray, records: list[int]) -> None:
        """Ops running at an earlier read that torch now says completed."""
        for key in [k for k in self.pending if k[0] == source]:
            at = bisect_left(records, key[1])
            if at == len(records) or records[at] != key[1]:
                continue  # torch overwrote it: it stays as it was
            entry = entries[at].as_py()
            gloo = _is_gloo(entry.get("profiling_name"))
            if _fr_state(entry.get("state"), entry.get("retired"), gloo) == COMPLETED:
                completed = int(entry.get("time_discovered_completed_ns") or 0)
                self.ring.finish(self.pending[key].record, COMPLETED, completed or None)
                del self.pending[key]

    def _rows(
        self, entries: pa.StructArray, records: list[int]
    ) -> tuple[list[tuple[int, ...]], list[tuple[int, int, _Pending]]]:
        """The torch ring's slots for the entries no hook recorded, and which of them
        still run: (position among the slots, FR record id, its pending op)."""

        column = entries.field
        group_at, group_names = encoded_rows(first_items(column("process_group")))
        state_at, state_names = encoded_rows(column("state"))
        name_at, profiling_names = encoded_rows(column("profiling_name"))
        # a group's timeout can change while it runs (torch's ``_set_pg_timeout``): each
        # entry says the one it ran under
        timeout_at, _ = encoded_rows(column("timeout_ms"))
        signature_at, _ = encoded_rows(signature_keys(entries))
        gloo = [_is_gloo(n) for n in profiling_names]
        signatures: dict[int | None, int] = {}  # distinct key -> the ring's signature
        # distinct (group, timeout) -> the ring's group
        groups: dict[tuple[int | None, int | None], int | None] = {}
        rows: list[tuple[int, ...]] = []
        running: list[tuple[int, int, _Pending]] = []
        now = time.time_ns()
        for i, (
            group_key,
            is_p2p,
            seq,
            p2p_seq,
            created,
            completed,
            retired,
            state_key,
        ) in enumerate(
            zip(
                group_at,
                column("is_p2p").to_pylist(),
                column("collective_seq_id").to_pylist(),
                column("p2p_seq_id").to_pylist(),
                column("time_created_ns").to_pylist(),
                column("time_discovered_completed_ns").to_pylist(),
                column("retired").to_pylist(),
                state_at,
                strict=True,
            )
        ):
            name = str(group_names[group_key]) if group_key is not None else "None"
            seq, p2p_seq = seq or 0, p2p_seq or 0
            hooked = self._hooked.get(name)
            if hooked is not None and (bool(is_p2p), p2p_seq if is_p2p else seq) in hooked:
                continue
            entry: dict[str, Any] | None = None  # the row as a dict, made once if needed
            group_timeout = (group_key, timeout_at[i])
            if group_timeout not in groups:
                entry = entries[i].as_py()
                groups[group_timeout] = self._group(name, entry)
            group = groups[group_timeout]
            if group is None:
                continue
            name_key = name_at[i]
            state = _fr_state(
                state_names[state_key] if state_key is not None else None,
                retired,
                name_key is not None and gloo[name_key],
            )
            created = created or now
            # gloo never says when an op ended: a span of no length, not an invented one
            done = (completed or created) if state == COMPLETED else 0
            signature_key = signature_at[i]  # never null: every part is filled
            signature = signatures.get(signature_key)
            if signature is None:
                entry = entry or entries[i].as_py()
                signature = signatures[signature_key] = self._signature(entry)
            row = (group, seq, p2p_seq, signature, -1, -1, created, done, state)
            if state != COMPLETED:
                entry = entry or entries[i].as_py()
                running.append((len(rows), records[i], self._pending_of(name, entry, row)))
            rows.append(row)
        return rows, running

    def _pending_of(self, name: str, entry: dict[str, Any], row: tuple[int, ...]) -> _Pending:
        timeout = detection_timeout_ns(
            int(entry.get("timeout_ms") or 0) * 1_000_000 or self._group_timeout.get(name, 0),
            self._timeout_s,
        )
        return _Pending(-1, row[6], timeout)

    def _group(self, name: str, entry: dict[str, Any]) -> int | None:
        """The torch ring's group of an entry: one per group and timeout, so that rows
        carry the timeout their op ran under, and the detection follows the newest."""
        timeout_ms = entry.get("timeout_ms")
        known = self._group_index.get(name)
        if known is not None and (not timeout_ms or known[1] == timeout_ms):
            return known[0]
        pg = self._groups().get(name)
        if pg is not None:
            info, timeout_ns = self._describe(pg)
        else:  # destroyed since: what the entry says
            group = entry.get("process_group")
            desc = str(group[1]) if isinstance(group, list | tuple) and len(group) > 1 else None
            timeout_ns = int(timeout_ms or 0) * 1_000_000
            info = GroupInfo(
                name=name, desc=desc, ranks=None, backend=None, timeout_ms=timeout_ns // 10**6
            )
        if timeout_ms and timeout_ms != info.timeout_ms:
            # the entry ran under another timeout than the group has now
            info, timeout_ns = replace(info, timeout_ms=timeout_ms), timeout_ms * 1_000_000
        index = self.ring.intern_group((info.name, info.ranks, info.timeout_ms), info)
        if known is None or entry.get("record_id", 0) >= known[2]:
            self._group_index[name] = (index, info.timeout_ms, entry.get("record_id", 0))
            self._group_timeout[name] = timeout_ns
            detections = (
                detection_timeout_ns(t, self._timeout_s) for t in self._group_timeout.values()
            )
            self.shortest_timeout_ns = min((d for d in detections if d), default=0)
        return index

    def _signature(self, entry: dict[str, Any]) -> int:
        """The ring's signature of an entry's op, sizes and dtypes (interned: once per
        distinct one for the life of the ring)."""
        profiling_name = str(entry.get("profiling_name") or "")
        sizes_in = entry.get("input_sizes") or []
        sizes_out = entry.get("output_sizes") or []
        dtypes_in = entry.get("input_dtypes") or []
        dtypes_out = entry.get("output_dtypes") or []
        is_p2p = bool(entry.get("is_p2p"))
        key = (
            profiling_name,
            tuple(map(tuple, sizes_in)),
            tuple(map(tuple, sizes_out)),
            tuple(dtypes_in),
            tuple(dtypes_out),
            is_p2p,
        )
        index = self._signatures.get(key)
        if index is None:
            named = self._names.get(profiling_name)
            if named is None:
                from fr_otel.dumps.parse import split_profiling_name

                named = self._names[profiling_name] = split_profiling_name(profiling_name)[:2]
            backend, op = named
            signature = Signature(
                op=op,
                input_sizes=list(sizes_in),
                output_sizes=list(sizes_out),
                input_dtypes=list(dtypes_in),
                output_dtypes=list(dtypes_out),
                is_p2p=is_p2p,
                backend=backend,
            )
            index = self._signatures[key] = self.ring.intern_signature(key, signature)
        return index
