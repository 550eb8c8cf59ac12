"""Torch's own Flight Recorder as the list of what this rank issued.

The hooks (``capture.py``) see the collectives that pass through ``torch.distributed``'s
Python functions. Torch's FR records in the C++ process group, so it also holds what
reaches the group another way: DDP's gradient-bucket all-reduces from the C++ reducer,
functional collectives (DTensor, tensor parallel, compiled code), ``ProcessGroup`` methods
called on the group object. The hooks number their records with torch's own ordinal
(``_get_sequence_number_for_group``), so an FR entry and a hook record of the same op share
(group name, sequence number).

``FrMirror`` copies the FR entries the hooks did not record into a second ring beside the
rank's own (``<ring dir>/job=J/run=R/_torch/rank-NNNNNN``, same slot format, written only by the
watch thread), so everything downstream (the flush, continuous mode's spans, a peer or
``fr-otel run`` flushing the ring of a rank that died) reads one rank's whole record from
its ring files.

Reading FR costs the training thread: torch's dump functions hold the GIL while they
serialise the buffer (measured on 2 cores: 31-37 ms for a JSON dump of 2,000 entries,
during which no other Python thread runs). So the mirror reads it only when torch's
counters say it holds ops the ring lacks, and then at most once per ``COST_FACTOR`` times
the last read's cost: the stall stays near 1% of wall time, whatever the buffer's size.
Asking a group's counter costs 0.2-0.3 µs and holds nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fr_otel.recorder.ring import (
    GroupInfo,
    RingWriter,
    Signature,
)
from fr_otel.recorder.slot import COMPLETED, SCHEDULED, STARTED

logger = logging.getLogger(__name__)

COST_FACTOR = 400
"""A read of torch's FR is followed by at least this many times its cost without one: at
most 0.25% of a core, the GIL held for at most that share of wall time. (Between reads
only the newest entries matter in incident mode: they are what a rank that dies leaves.)"""
COMPLETE_COST_FACTOR = 50
"""In continuous mode, where every entry must become a span, reads come as often as torch's
buffer needs (``WRAP_SHARE``), but never more often than this many times their cost: at
most 2% of a core. Past that rate of C++ collectives, entries torch overwrote before a read
are counted as missed."""
WRAP_SHARE = 0.8
"""Continuous mode reads again before torch has issued this share of its buffer, at the
highest recent rate (``PEAK_HALF_LIFE_S``). Each read costs the whole buffer (torch
serialises all of it), so the CPU per collective goes as 1 / share: at 0.5 a read paid for
twice the entries it brought, at 0.8 for 1.25 times; a burst 25% above the recent peak
rate is what it takes to lose entries (counted as missed)."""
PEAK_HALF_LIFE_S = 30.0
"""How fast the peak collective rate continuous mode plans its reads for forgets a burst."""
MIN_INTERVAL_S = 1.0
"""The shortest time between two reads (the watch thread ticks faster)."""
MAX_INTERVAL_S = 30.0
"""The longest time ops the ring lacks wait for a read (shorter for short group timeouts:
``DETECT_SHARE`` of the detection timeout)."""
DETECT_SHARE = 3
DETECTION_SHARE = 0.75
"""By default an op is overdue at this share of its group's timeout: the rank declares and
flushes before torch's own timeout ends the op (and, with NCCL, the process)."""


def detection_timeout_ns(group_timeout_ns: int, setting_s: float | None) -> int:
    """When an op counts as overdue: ``FR_OTEL_TIMEOUT`` if set, else a share of the
    group's own timeout (0 when neither is known: never)."""
    if setting_s is not None:
        return int(setting_s * 1e9)
    return int(group_timeout_ns * DETECTION_SHARE)


FR_SOURCES = ("_dump_fr_trace", "_dump_nccl_trace")
"""Torch keeps one Flight Recorder per event type: the generic one (gloo and other CPU
backends) and NCCL's. A job with groups of both has entries in both, each numbered on its
own (``record_id``). Their pickle dumps, without stack traces, are read: for 2,000 entries
17-26 ms to dump and 3-4 ms to load here, against 47-53 ms and 9 ms for the JSON ones."""


def torch_fr_entries() -> dict[str, list[dict[str, Any]]] | None:
    """This process's FR entries (no stack traces) by recorder, or None when torch has
    none. The dump is torch's own, of this process; it is still loaded by the restricted
    unpickler that refuses every global, as every dump is."""
    try:
        from torch._C import _distributed_c10d as c10d_ext
    except ImportError:
        return None
    from fr_otel.dumps.safe_pickle import loads_plain

    found: dict[str, list[dict[str, Any]]] = {}
    for name in FR_SOURCES:
        function: Any = getattr(c10d_ext, name, None)
        if function is None:
            continue
        try:
            raw = function(includeCollectives=True, includeStackTraces=False, onlyActive=False)
        except Exception:  # NCCL's recorder exists but this process has no NCCL group
            continue
        entries = loads_plain(bytes(raw)).get("entries", []) if raw else []
        if isinstance(entries, list):
            found[name] = entries
    return found if found else None


def _frozen(sizes: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(map(tuple, sizes)) if sizes else ()


def _group_name(entry: dict[str, Any]) -> str:
    group = entry.get("process_group")
    return str(group[0]) if isinstance(group, list | tuple) and group else str(group)


def _fr_state(entry: dict[str, Any]) -> int:
    """A slot state for an FR entry: NCCL's own, gloo's ``retired`` (its only completion
    signal: gloo never discovers start or completion)."""
    state = entry.get("state")
    if state == "completed" or (entry.get("retired") and state == "scheduled"):
        return COMPLETED
    if state == "started":
        return STARTED
    return STARTED if _is_gloo(entry) else SCHEDULED


def _is_gloo(entry: dict[str, Any]) -> bool:
    return str(entry.get("profiling_name", "")).startswith("gloo:")


@dataclass(kw_only=True)
class MirrorStats:
    reads: int = 0
    mirrored: int = 0
    """FR entries written to the torch ring (the hooks had not recorded them)."""
    missed: int = 0
    """FR entries torch overwrote before a read (its buffer is smaller than the gap)."""
    last_cost_s: float = 0.0
    """Wall time of the last read (the GIL is held for most of it)."""
    total_cost_s: float = 0.0


@dataclass
class _Pending:
    record: int
    created_ns: int
    timeout_ns: int


class FrMirror:
    """Keeps the torch ring up to date with torch's FR. Called from the watch thread."""

    def __init__(
        self,
        *,
        main: RingWriter,
        base: Path,
        groups: Callable[[], dict[str, Any]],
        describe: Callable[[Any], tuple[GroupInfo, int]],
        timeout_s: float | None,
        hook_counters: Callable[[], dict[str, Callable[[], int]]] = dict,
        complete: bool = False,
        fr_capacity: int = 2000,
        read: Callable[[], dict[str, list[dict[str, Any]]] | None] = torch_fr_entries,
    ) -> None:
        self.main = main
        self.ring = main.sibling(base)
        self._groups = groups
        """Group name -> process group object (torch's registry)."""
        self._describe = describe
        """Process group -> (its GroupInfo, its own timeout in ns)."""
        self._hook_counters = hook_counters
        """Group name -> the hooks' collective counter, for the groups they have seen."""
        self._complete = complete
        """Continuous mode: every entry matters, not only the newest."""
        self._fr_capacity = fr_capacity
        """Entries torch's buffer holds (each of its recorders)."""
        self._issued: tuple[float, int] | None = None
        self.rate = 0.0
        """Collectives per second, all groups (smoothed): how fast torch's buffer turns."""
        self.peak_rate = 0.0
        """The highest rate measured lately (halved every ``PEAK_HALF_LIFE_S``)."""
        self._timeout_s = timeout_s
        self._read = read
        self.stats = MirrorStats()
        self._cursor = 0
        """Main-ring records before it are in ``_hooked``."""
        self._hooked: dict[str, set[tuple[bool, int]]] = {}
        """Group name -> (is p2p, seq) the hooks recorded, newest first kept."""
        self._read_upto: dict[str, int] = {}
        """Group name -> every collective up to this seq is in one of the two rings (the
        group's count at the last read, or later ones all hooked)."""
        self._last_fr_record: dict[str, int] = {}
        """Per FR source, the newest record id read."""
        self._pending: dict[tuple[str, int], _Pending] = {}
        """(FR source, record id) -> the torch ring's record of an op still running at the
        last read."""
        self._next_read = 0.0
        self._overdue_seen: set[tuple[str, int]] = set()
        self._group_index: dict[str, int] = {}
        self._group_timeout: dict[str, int] = {}
        self._signatures: dict[Any, int] = {}
        self._names: dict[str, tuple[str | None, str]] = {}
        """FR profiling name -> (backend, op)."""
        self.shortest_timeout_ns = 0

    # --- when ------------------------------------------------------------------------------

    def tick(self) -> str | None:
        """One look (the watch's poll): read FR when it holds ops the rings lack, or to
        confirm an op that looks overdue. Returns ``"timeout"`` for an overdue op."""
        now = time.monotonic()
        counters = self._counters() if self._complete else None
        if counters is not None:
            self._measure_rate(now, counters)
        overdue = self._overdue() is not None
        if now < self._next_read and not overdue:
            return None
        if not overdue and not self._behind(counters or self._counters()):
            return None
        return self.read()

    def _behind(self, counters: dict[str, int]) -> bool:
        """Has some group issued a collective since the last read that no hook recorded?
        (A later hooked op does not vouch for the ones before it: a barrier after DDP's
        bucket all-reduces.)"""
        stale = {n: c for n, c in counters.items() if c > self._read_upto.get(n, 0)}
        if not stale:
            return False
        self._scan_main()
        for name, count in stale.items():
            hooked = self._hooked.get(name, set())
            start = self._read_upto.get(name, 0)
            if any((False, seq) not in hooked for seq in range(start + 1, count + 1)):
                return True
            self._read_upto[name] = count
        return False

    def _counters(self) -> dict[str, int]:
        """Group name -> its collectives so far, in FR's numbering (the hooks' counter
        where they know the group: gloo's own counts sends and receives too)."""
        found: dict[str, int] = {}
        hooks = self._hook_counters()
        for name, pg in self._groups().items():
            counter = hooks.get(name)
            try:
                found[name] = int(counter() if counter else pg._get_sequence_number_for_group())
            except Exception:  # a backend without one: only a read tells
                found[name] = self._read_upto.get(name, 0) + 1
        return found

    def _overdue(self) -> tuple[str, int] | None:
        """An op still running past its detection timeout, not reported yet."""
        now = time.time_ns()
        return next(
            (
                key
                for key, p in self._pending.items()
                if p.timeout_ns
                and now - p.created_ns > p.timeout_ns
                and key not in self._overdue_seen
            ),
            None,
        )

    def _measure_rate(self, now: float, counters: dict[str, int]) -> None:
        total = sum(counters.values())
        if self._issued is not None and now > self._issued[0]:
            elapsed = now - self._issued[0]
            latest = max(total - self._issued[1], 0) / elapsed
            self.rate = latest if not self.rate else 0.7 * self.rate + 0.3 * latest
            self.peak_rate = max(latest, self.peak_rate * 0.5 ** (elapsed / PEAK_HALF_LIFE_S))
        self._issued = (now, total)

    def _interval(self) -> float:
        ceiling = MAX_INTERVAL_S
        if self.shortest_timeout_ns:
            ceiling = min(ceiling, self.shortest_timeout_ns / 1e9 / DETECT_SHARE)
        cost = self.stats.last_cost_s
        interval = COST_FACTOR * cost
        rate = max(self.rate, self.peak_rate)
        if self._complete and rate > 0:
            # before torch overwrites what was not read, within the cap
            wrap = WRAP_SHARE * self._fr_capacity / rate
            interval = max(min(interval, wrap), COMPLETE_COST_FACTOR * cost)
        return min(max(MIN_INTERVAL_S, interval), ceiling)

    # --- what ------------------------------------------------------------------------------

    def _scan_main(self) -> None:
        """Note what the hooks recorded since the last look (their slots precede torch's
        entries of the same ops: a hook writes its slot before it calls torch)."""
        end = self.main.next_record
        if end == self._cursor:
            return
        names = self.main.group_names()
        for group, is_p2p, seq in self.main.collective_keys(self._cursor, end):
            name = names.get(group)
            if name is not None:
                self._hooked.setdefault(name, set()).add((is_p2p, seq))
        self._cursor = end

    def read(self) -> str | None:
        """Read torch's FR once and mirror what the rings lack. Returns ``"timeout"`` when
        an op is still running past its detection timeout."""
        started = time.perf_counter()
        try:
            counters = self._counters()  # before the dump: it holds all these
            sources = self._read()
            if sources is None:
                return None
            self._scan_main()  # after the dump: every hooked op of it is in the ring now
            for source, entries in sources.items():
                self._take(source, entries)
            self._read_upto.update(counters)
            self._prune()
        finally:
            # the whole pass, not only torch's dump: turning entries into records is
            # CPU this process spends too
            cost = time.perf_counter() - started
            self.stats.reads += 1
            self.stats.last_cost_s = cost
            self.stats.total_cost_s += cost
            self._next_read = time.monotonic() + self._interval()
        overdue = self._overdue()
        if overdue is None:
            return None
        self._overdue_seen.add(overdue)
        return "timeout"

    def _take(self, source: str, entries: list[dict[str, Any]]) -> None:
        last = self._last_fr_record.get(source, -1)
        if entries and last >= 0:
            first = min(int(e.get("record_id", 0)) for e in entries)
            if first > last + 1:
                self.stats.missed += first - last - 1
        newest = last
        rows: list[tuple[int, ...]] = []
        running: list[tuple[int, tuple[str, int], _Pending]] = []
        for entry in entries:
            fr_record = int(entry.get("record_id", -1))
            if fr_record <= last:
                pending = self._pending.get((source, fr_record))
                if pending is not None and _fr_state(entry) == COMPLETED:
                    completed = int(entry.get("time_discovered_completed_ns") or 0)
                    self.ring.finish(pending.record, COMPLETED, completed or None)
                    del self._pending[(source, fr_record)]
                continue
            newest = max(newest, fr_record)
            row = self._row(entry)
            if row is None:
                continue
            if row[-1] != COMPLETED:
                running.append((len(rows), (source, fr_record), self._pending_of(entry, row)))
            rows.append(row)
        if rows:
            first = self.ring.append(rows)
            for offset, key, pending in running:
                pending.record = first + offset
                self._pending[key] = pending
            self.stats.mirrored += len(rows)
        self._last_fr_record[source] = newest

    def _row(self, entry: dict[str, Any]) -> tuple[int, ...] | None:
        """The torch ring's slot for an entry no hook recorded (None for a hooked one)."""
        name = _group_name(entry)
        is_p2p = bool(entry.get("is_p2p"))
        seq = int(entry.get("collective_seq_id") or 0)
        p2p_seq = int(entry.get("p2p_seq_id") or 0)
        if (is_p2p, p2p_seq if is_p2p else seq) in self._hooked.get(name, ()):
            return None
        group = self._group(name, entry)
        if group is None:
            return None
        state = _fr_state(entry)
        created = int(entry.get("time_created_ns") or 0) or time.time_ns()
        done = 0
        if state == COMPLETED:
            # gloo never says when an op ended: a span of no length, not an invented one
            done = int(entry.get("time_discovered_completed_ns") or 0) or created
        signature = self._signature(entry)
        return (group, seq, p2p_seq, signature, -1, -1, created, done, state)

    def _pending_of(self, entry: dict[str, Any], row: tuple[int, ...]) -> _Pending:
        timeout = detection_timeout_ns(
            int(entry.get("timeout_ms") or 0) * 1_000_000
            or self._group_timeout.get(_group_name(entry), 0),
            self._timeout_s,
        )
        return _Pending(-1, row[6], timeout)

    def _group(self, name: str, entry: dict[str, Any]) -> int | None:
        index = self._group_index.get(name)
        if index is not None:
            return index
        pg = self._groups().get(name)
        if pg is not None:
            info, timeout_ns = self._describe(pg)
        else:  # destroyed since: what the entry says
            group = entry.get("process_group")
            desc = str(group[1]) if isinstance(group, list | tuple) and len(group) > 1 else None
            timeout_ns = int(entry.get("timeout_ms") or 0) * 1_000_000
            info = GroupInfo(
                name=name, desc=desc, ranks=None, backend=None, timeout_ms=timeout_ns // 10**6
            )
        index = self.ring.intern_group((info.name, info.ranks), info)
        self._group_index[name] = index
        self._group_timeout[name] = timeout_ns
        detect = detection_timeout_ns(timeout_ns, self._timeout_s)
        if detect and (not self.shortest_timeout_ns or detect < self.shortest_timeout_ns):
            self.shortest_timeout_ns = detect
        return index

    def _signature(self, entry: dict[str, Any]) -> int:
        profiling_name = str(entry.get("profiling_name", ""))
        get = entry.get
        key = (
            profiling_name,
            _frozen(get("input_sizes")),
            _frozen(get("output_sizes")),
            tuple(get("input_dtypes") or ()),
            tuple(get("output_dtypes") or ()),
            bool(get("is_p2p")),
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
                input_sizes=list(entry.get("input_sizes") or []),
                output_sizes=list(entry.get("output_sizes") or []),
                input_dtypes=list(entry.get("input_dtypes") or []),
                output_dtypes=list(entry.get("output_dtypes") or []),
                is_p2p=bool(entry.get("is_p2p")),
                backend=backend,
            )
            index = self._signatures[key] = self.ring.intern_signature(key, signature)
        return index

    def _prune(self) -> None:
        """Forget hooked seqs far behind every group's newest (torch's buffer no longer
        holds them, so no read can bring them back)."""
        keep = 4 * self.main.capacity
        for name, seqs in self._hooked.items():
            if len(seqs) > keep:
                newest = self._read_upto.get(name, 0)
                self._hooked[name] = {s for s in seqs if s[1] > newest - keep}

    def close(self) -> None:
        self.ring.close()
