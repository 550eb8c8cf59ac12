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
its ring files. It also learns torch's name for each op the hooks record (``_TorchOps``):
the hooks see the function called, torch's FR the op that ran, and rows of both meet.

Reading FR costs the training thread: torch's dump functions hold the GIL while they
serialise the buffer (measured on 2 cores: 14-21 ms for a pickle dump of 2,000 entries,
during which no other Python thread runs). So the mirror reads it only when torch's
counters say it holds ops the ring lacks, and then at most once per ``COST_FACTOR`` times
the recent reads' cost: the stall stays near 1% of wall time, whatever the buffer's size.
What the mirror adds to torch's dump is kept small: the dump is decoded into columns by
the import's C decoder, and only the entries newer than the last read become Python
values (2,000 entries of which 1,260 new: 6-8 ms after the dump as dicts, 3-4 ms so).
Asking a group's counter costs 0.2-0.3 µs and holds nothing.
"""

from __future__ import annotations

import logging
import statistics
import time
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import cache
from itertools import groupby, pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fr_otel.recorder.hooked_seqs import HookedSeqs
from fr_otel.recorder.ring import (
    GroupInfo,
    RingWriter,
    Signature,
)
from fr_otel.recorder.slot import COMPLETED, SCHEDULED, STARTED
from fr_otel.recorder.triggers import POLL_S

if TYPE_CHECKING:  # pyarrow is imported where entries are read: not at install
    import pyarrow as pa

logger = logging.getLogger(__name__)

COST_FACTOR = 400
"""A read of torch's FR is followed by at least this many times its cost without one: at
most 0.25% of a core, the GIL held for at most that share of wall time. (Between reads
only the newest entries matter in incident mode: they are what a rank that dies leaves.)"""
COMPLETE_COST_FACTOR = 50
"""In continuous mode, where every entry must become a span, reads come as often as torch's
buffer needs (``FILL_SHARE``), but never more often than this many times their cost: at
most 2% of a core. Past that rate of C++ collectives, entries torch overwrote before a read
are counted as missed."""
FILL_SHARE = 0.85
"""Continuous mode reads once torch's buffer holds this share of entries no read has
brought (torch's counters say how many, 0.2-0.3 µs a group). Each read costs the whole
buffer (torch serialises all of it), so the CPU per collective goes as 1 / share: reads
planned from a measured rate came at 60-65% of the buffer in DDP runs here (a burst had to
be planned for), each entry paying for 1.6 times its own dump. What is left (300 of
torch's default 2,000 entries) absorbs a rate that doubles between two looks, or a look
that comes late."""
MIN_INTERVAL_S = 1.0
"""The shortest time between two reads (the watch thread ticks faster)."""
QUIET_READ_S = 1.0
"""A rank whose collectives stopped this long (torch's counters unchanged) while ops no
hook recorded wait unread is read then, once per quiet spell, rather than at the next
interval (up to ``MAX_INTERVAL_S``): those are the ops a hung rank waits in, which the
live check compares across ranks; a running job's counters move every step, so it pays
for no extra read."""
BEHIND_CHECK_S = 1.0
"""Between reads, how often the watch asks whether the hooks recorded every collective
(to mark the rings complete, or to find a quiet spell's unread ops). Each time decodes
the hooks' records since the last: what a few array operations cost a thread that wakes
to cold caches mattered more than the records (most of the watch's CPU in a tight
all_reduce loop at every poll), and neither the live check's stalls (30 s, or five steps)
nor a quiet spell (``QUIET_READ_S``) needs it sooner."""
MAX_INTERVAL_S = 30.0
"""The longest time ops the ring lacks wait for a read (shorter for short group timeouts:
``DETECT_SHARE`` of the detection timeout)."""
COST_MEMORY = 5
"""Continuous mode's cap uses the median cost of this many recent reads: one read slowed by
the machine (twice the usual, in DDP runs here) would otherwise hold its reads back under
the cap while torch overwrote entries. The spacing of other reads (``_interval``) uses the
larger of that median and the last read's cost: reads cost more as torch's buffer fills,
and a median that lagged behind them let the first reads of a DDP job come three times as
often as ``COST_FACTOR`` allows (4 reads of 12-22 ms in its first 8 s)."""
EARLY_LOOK = 1.5
"""Continuous mode: when the buffer would reach ``FILL_SHARE`` within this many watch polls
at the rate of the last one, the look waits for that moment and reads then, rather than
trusting the next look (a poll comes late when the GIL is busy)."""
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
17-26 ms to dump here, against 47-53 ms for the JSON ones."""


def fr_columns(data: bytes) -> pa.StructArray:
    """A pickle dump's entries as columns (``parse.RAW_ENTRY``): by the import's C decoder
    (0.8 ms for 2,000 entries here, against 3-5 ms for the restricted unpickler, which
    reads what the decoder declines; both refuse every global)."""
    from fr_otel.dumps.columnar import decode_columns
    from fr_otel.dumps.parse import raw_entries
    from fr_otel.dumps.safe_pickle import loads_plain

    if not data:
        return raw_entries([])
    decoded = decode_columns(data)
    if decoded is not None:
        return decoded[1].raw
    entries = loads_plain(data).get("entries", [])
    return raw_entries(entries if isinstance(entries, list) else [])


def torch_fr_entries() -> dict[str, pa.StructArray] | None:
    """This process's FR entries (no stack traces) by recorder, or None when torch has
    none. The dump is torch's own, of this process; it is still read as untrusted, as
    every dump is."""
    try:
        from torch._C import _distributed_c10d as c10d_ext
    except ImportError:
        return None
    found: dict[str, pa.StructArray] = {}
    for name in FR_SOURCES:
        function: Any = getattr(c10d_ext, name, None)
        if function is None:
            continue
        try:
            raw = function(includeCollectives=True, includeStackTraces=False, onlyActive=False)
            found[name] = fr_columns(bytes(raw) if raw else b"")
        except Exception:  # NCCL's recorder exists but this process has no NCCL group
            continue
    return found if found else None


@cache
def _text(value: str) -> pa.Scalar:
    """A string scalar, made once: pyarrow converting a Python literal in a compute call
    looks for dateutil each time (a filesystem search where it is not installed)."""
    import pyarrow as pa

    return pa.scalar(value, pa.string())


def _sizes_text(sizes: pa.ListArray) -> pa.Array:
    """``[[2, 3], []]`` -> ``"[2x3][]"``: one text per row, equal for equal shape lists."""
    import pyarrow as pa
    import pyarrow.compute as pc

    inner = sizes.flatten()
    texts = pc.binary_join(inner.cast(pa.list_(pa.string())), _text("x"))
    shapes = pc.binary_join_element_wise(_text("["), texts, _text("]"), _text(""))
    offsets = sizes.offsets
    rebased = pc.subtract(offsets, offsets[0]) if len(offsets) else offsets
    per_row = pa.ListArray.from_arrays(rebased, shapes, mask=sizes.is_null())
    return pc.binary_join(per_row, _text(""))


def _signature_keys(entries: pa.StructArray) -> pa.DictionaryArray:
    """Per entry, what makes its ``Signature``, as a text (Arrow hashes no nested lists):
    entries of one call site share it, so each distinct one is built once."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = [
        entries.field("profiling_name"),
        _sizes_text(entries.field("input_sizes")),
        _sizes_text(entries.field("output_sizes")),
        pc.binary_join(entries.field("input_dtypes"), _text(",")),
        pc.binary_join(entries.field("output_dtypes"), _text(",")),
        entries.field("is_p2p").cast(pa.string()),
    ]
    text = pc.binary_join_element_wise(*[pc.fill_null(p, _text("")) for p in parts], _text("|"))
    return pc.dictionary_encode(text)


def _encoded(array: pa.Array) -> tuple[list[int | None], list[Any]]:
    """Per row an index into the distinct values (None for a null), and those values."""
    from fr_otel.dumps.parse import encoded

    values, indices = encoded(array)
    return indices.to_pylist(), values


def _first_items(lists: pa.ListArray) -> pa.Array:
    """Each list's first item; null for a null or empty list."""
    import pyarrow as pa
    import pyarrow.compute as pc

    filled = pc.greater(pc.list_value_length(lists), 0)
    return pc.list_element(pc.if_else(filled, lists, pa.scalar(None, lists.type)), 0)


def _in_record_order(entries: pa.StructArray) -> tuple[pa.StructArray, list[int]]:
    """The entries with a record id, in record order (torch dumps its ring oldest first;
    anything else is sorted, not trusted), and their record ids."""
    import pyarrow.compute as pc

    ids = entries.field("record_id")
    if ids.null_count:
        entries = entries.filter(pc.is_valid(ids))
        ids = entries.field("record_id")
    records: list[int] = ids.to_pylist()
    if any(later < earlier for earlier, later in pairwise(records)):
        entries = entries.take(pc.sort_indices(ids))
        records.sort()
    return entries, records


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


@dataclass(kw_only=True)
class MirrorStats:
    reads: int = 0
    mirrored: int = 0
    """FR entries written to the torch ring (the hooks had not recorded them)."""
    missed: int = 0
    """FR entries torch overwrote before a read (its buffer is smaller than the gap)."""
    gaps: int = 0
    """Runs of a group's collectives noted as lost in the ring (``RingWriter.note_gap``)."""
    last_cost_s: float = 0.0
    """CPU time of the last read (the GIL is held for most of it)."""
    total_cost_s: float = 0.0
    recent_costs: deque[float] = field(default_factory=lambda: deque(maxlen=COST_MEMORY))
    """The last reads' CPU times: reads are spaced by their median."""


@dataclass
class _Pending:
    record: int
    created_ns: int
    timeout_ns: int


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return True


LEARN_TRIES = 3
"""Reads that may look for a hooked signature's records in torch's FR without finding one
before its torch op is given up (its rows keep the function called as their op): gloo's
``monitored_barrier`` is recorded by no FR entry, nor is anything where torch's FR is off,
and an entry may land just after the dump that should have held it."""
LEARN_KEYS = 8
"""Per signature still to learn, the newest of its hooked (group, seq) kept for the next
read: one that torch's FR holds is enough."""


@cache
def _false() -> pa.Scalar:
    import pyarrow as pa

    return pa.scalar(False, pa.bool_())


def _collective_names(entries: pa.StructArray, seqs: Iterable[int]) -> dict[tuple[str, int], str]:
    """(group name, collective seq) -> profiling name of the collectives among ``entries``
    whose seq is one of ``seqs`` (filtered as columns: the rest never become values)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = pa.array(sorted(set(seqs)), pa.int64())
    p2p = pc.fill_null(entries.field("is_p2p"), _false())
    seq = entries.field("collective_seq_id")
    picked = entries.filter(pc.and_(pc.is_in(seq, value_set=wanted), pc.invert(p2p)))
    return {
        (str(name), int(number)): str(profiling_name)
        for name, number, profiling_name in zip(
            _first_items(picked.field("process_group")).to_pylist(),
            picked.field("collective_seq_id").to_pylist(),
            picked.field("profiling_name").to_pylist(),
            strict=True,
        )
        if number is not None and profiling_name
    }


class _TorchOps:
    """Learns torch's own name for each hook signature's op, from torch's FR entries of the
    same (group, collective seq), and notes it in the hooks' ring
    (``RingWriter.note_torch_op``): the hooks see the function called
    (``reduce_scatter_tensor``), torch's FR the op that ran (``gloo:all_reduce``, gloo's
    fallback; NCCL's ``_reduce_scatter_base``), and an archive mixes rows of both, which
    the analyzer compares by op. A static table would be torch's and each backend's of one
    version.

    Its cost stops once every signature is settled (learned, point-to-point, or given up
    after ``LEARN_TRIES`` reads): then a look is a comparison of two counts, and the
    hooks' path never changes."""

    def __init__(self, main: RingWriter) -> None:
        self._main = main
        self._classified = 0
        """Signature indexes below it are settled or in ``_open``."""
        self._open: dict[int, int] = {}
        """Signature -> reads left to find one of its records in torch's FR."""
        self._keys: dict[int, deque[tuple[int, int]]] = {}
        """Signature -> the newest (group, seq) of its records no read has looked for."""
        self._cursor = 0
        """Main-ring records before it were looked at for ``_open`` signatures."""

    def waiting(self) -> bool:
        """Has the hooks' ring a record of a signature still to learn that no read has
        looked for yet? (A reason to read torch's FR at the next allowed time.)"""
        self._scan()
        return bool(self._keys)

    def _scan(self) -> None:
        end = self._main.next_record  # first: every signature its records use is counted
        count = self._main.signature_count()
        while self._classified < count:
            signature = self._main.signature(self._classified)
            # a send or recv is not learned: torch's FR names it as the hooks do, when
            # it records it at all (gloo's does not)
            if signature is not None and not signature.is_p2p:
                self._open[self._classified] = LEARN_TRIES
            self._classified += 1
        if self._open and end > self._cursor:
            for group, seq, signature_index in self._main.signature_keys(
                self._cursor, end, self._open
            ):
                keys = self._keys.get(signature_index)
                if keys is None:
                    keys = self._keys[signature_index] = deque(maxlen=LEARN_KEYS)
                keys.append((group, seq))
        self._cursor = end

    def learn(self, dumps: Iterable[pa.StructArray], counters: dict[str, int]) -> None:
        """After a read of torch's FR (``dumps``, taken once the groups had issued
        ``counters``): note the torch op of each signature one of whose records the dump
        holds. A signature whose records issued before the dump it lacks loses a try;
        records issued since wait for the next read."""
        self._scan()
        if not self._keys:
            return
        names = self._main.group_names()
        wanted: dict[tuple[str, int], int] = {}
        for signature_index, keys in self._keys.items():
            for group, seq in keys:
                name = names.get(group)
                if name is not None:
                    wanted[(name, seq)] = signature_index
        found: dict[tuple[str, int], str] = {}
        for entries in dumps:
            found.update(_collective_names(entries, (seq for _, seq in wanted)))
        from fr_otel.dumps.parse import split_profiling_name

        for key, signature_index in wanted.items():
            profiling_name = found.get(key)
            if profiling_name is None or signature_index not in self._open:
                continue
            backend, op, _ = split_profiling_name(profiling_name)
            if op == "coalesced":  # NCCL's entry for a batch of ops, not this one's
                continue
            self._main.note_torch_op(signature_index, op, backend)
            self._settle(signature_index)
        for signature_index, keys in list(self._keys.items()):
            # issued after the dump: the next read looks (a group gone since: never)
            later = [(g, seq) for g, seq in keys if seq > counters.get(names.get(g, ""), seq)]
            if len(later) == len(keys):
                continue
            tries = self._open[signature_index] - 1
            if tries <= 0:
                self._settle(signature_index)  # given up: the function called stays the op
                continue
            self._open[signature_index] = tries
            if later:
                self._keys[signature_index] = deque(later, maxlen=LEARN_KEYS)
            else:
                del self._keys[signature_index]

    def _settle(self, signature_index: int) -> None:
        self._open.pop(signature_index, None)
        self._keys.pop(signature_index, None)


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
        self._issued_at_read = 0
        """Collectives issued (torch's counters, all groups) when the last read began."""
        self._last_look: tuple[float, int] | None = None
        """(monotonic time, collectives issued) at continuous mode's previous look."""
        self._timeout_s = timeout_s
        self._read = read
        self.stats = MirrorStats()
        self._cursor = 0
        """Main-ring records before it are in ``_hooked``."""
        self._hooked: dict[str, HookedSeqs] = {}
        """Group name -> the ops the hooks recorded."""
        self._torch_ops = _TorchOps(main)
        self._read_upto: dict[str, int] = {}
        """Group name -> every collective up to this seq is in one of the two rings (the
        group's count at the last read, or later ones all hooked)."""
        self._last_fr_record: dict[str, int] = {}
        """Per FR source, the newest record id read."""
        self._pending: dict[tuple[str, int], _Pending] = {}
        """(FR source, record id) -> the torch ring's record of an op still running at the
        last read."""
        self._read_at = float("-inf")
        """When the last read ended (monotonic): the next is due an ``_interval()`` later,
        as that interval stands at each look (or sooner, in continuous mode, once torch's
        buffer fills)."""
        self._overdue_seen: set[tuple[str, int]] = set()
        self._group_index: dict[str, tuple[int, int | None, int]] = {}
        """Group name -> (the torch ring's group, its timeout in ms, the FR record that
        said so): the newest timeout each group ran under."""
        self._group_timeout: dict[str, int] = {}
        self._signatures: dict[Any, int] = {}
        self._names: dict[str, tuple[str | None, str]] = {}
        """FR profiling name -> (backend, op)."""
        self.shortest_timeout_ns = 0
        self._behind_since_read = False
        """A look since the last read found ops the hooks did not record: the rings are
        not complete until the next read."""
        self._quiet_issued = -1
        self._quiet_since = 0.0
        """When torch's counters last changed (monotonic), as of ``_quiet_issued``."""
        self._quiet_read = False
        """This quiet spell's read was made."""
        self._behind_checked = float("-inf")
        """When ``_quiet_and_behind`` last asked ``_behind`` (monotonic)."""

    # --- when ------------------------------------------------------------------------------

    def tick(self, pause: Callable[[float], bool] = _sleep) -> str | None:
        """One look (the watch's poll): read FR when it holds ops the rings lack, or to
        confirm an op that looks overdue. Returns ``"timeout"`` for an overdue op.
        ``pause(seconds)`` waits for the moment torch's buffer fills (continuous mode), and
        says whether to read then: the recorder's lets a flush read meanwhile, and says no
        once the recorder is closing."""
        now = time.monotonic()
        looked_ns = time.time_ns()
        counters = self._counters() if self._complete else None
        if counters is not None:
            issued = sum(counters.values())
            wait = self._until_full(now, issued)
            if wait is not None and now - self._read_at >= COMPLETE_COST_FACTOR * self._cost():
                if self._behind(counters):
                    if wait > 0:
                        reads = self.stats.reads
                        # the watch's other checks wait less than two polls
                        if not pause(wait) or self.stats.reads != reads:
                            return None  # closing, or a flush read meanwhile: all is in
                    return self.read()
                self._issued_at_read = issued  # the hooks recorded every one: nothing to read
                self.ring.mark_complete(looked_ns)
        overdue = self._overdue() is not None
        if now < self._read_at + self._interval() and not overdue:
            if not self._quiet_and_behind(counters, now, looked_ns):
                return None
            self._quiet_read = True
            return self.read()
        if (
            not overdue
            and not self._behind(counters or self._counters())
            # a signature's first records: torch's name for its op, within seconds
            and not self._torch_ops.waiting()
        ):
            self.ring.mark_complete(looked_ns)
            return None
        return self.read()

    def _quiet_and_behind(
        self, counters: dict[str, int] | None, now: float, looked_ns: int
    ) -> bool:
        """Between reads: whether to read now, because the rank's collectives stopped
        (``QUIET_READ_S``) with ops no hook recorded still unread. Else, when the hooks
        recorded every collective since the last read, the rings are complete as of this
        look (what a rank stuck in host code finds, cheaply: no dump of torch's FR)."""
        counters = counters if counters is not None else self._counters()
        issued = sum(counters.values())
        if issued != self._quiet_issued:
            self._quiet_issued, self._quiet_since, self._quiet_read = issued, now, False
        if not self._behind_since_read:  # once per read: ``_behind`` walks every op since
            if now - self._behind_checked < BEHIND_CHECK_S:
                return False
            self._behind_checked = now
            if not self._behind(counters):
                self.ring.mark_complete(looked_ns)
                return False
            self._behind_since_read = True
        return (
            not self._quiet_read
            and now - self._quiet_since >= QUIET_READ_S
            and now - self._read_at >= MIN_INTERVAL_S
        )

    def _behind(self, counters: dict[str, int]) -> bool:
        """Has some group issued a collective since the last read that no hook recorded?
        (A later hooked op does not vouch for the ones before it: a barrier after DDP's
        bucket all-reduces.)"""
        stale = {n: c for n, c in counters.items() if c > self._read_upto.get(n, 0)}
        if not stale:
            return False
        self._scan_main()
        for name, count in stale.items():
            hooked = self._hooked.get(name)
            start = self._read_upto.get(name, 0)
            if hooked is None or not hooked.covers(start + 1, count):
                return True
            self._read_upto[name] = count
        # a job whose hooks see every collective may never read torch's FR: what they saw
        # is forgotten here too, or it grew by every collective for the job's whole life
        self._prune()
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

    def _until_full(self, now: float, issued: int) -> float | None:
        """Continuous mode: seconds until torch's buffer holds ``FILL_SHARE`` of entries
        no read has brought, when that comes before the next look can act (0: it does
        now); None when a later look will do."""
        previous, self._last_look = self._last_look, (now, issued)
        unread = issued - self._issued_at_read
        if unread < 0:  # a group was destroyed since: count from here
            self._issued_at_read, unread = issued, 0
        target = FILL_SHARE * self._fr_capacity
        if unread >= target:
            return 0.0
        if previous is None or now <= previous[0] or issued <= previous[1]:
            return None
        rate = (issued - previous[1]) / (now - previous[0])
        wait = (target - unread) / rate
        return wait if wait < EARLY_LOOK * POLL_S else None

    def _cost(self) -> float:
        recent = self.stats.recent_costs
        return statistics.median(recent) if recent else self.stats.last_cost_s

    def _interval(self) -> float:
        ceiling = MAX_INTERVAL_S
        if self.shortest_timeout_ns:
            ceiling = min(ceiling, self.shortest_timeout_ns / 1e9 / DETECT_SHARE)
        cost = max(self._cost(), self.stats.last_cost_s)  # each read pays for its own wait
        return min(max(MIN_INTERVAL_S, COST_FACTOR * cost), ceiling)

    # --- what ------------------------------------------------------------------------------

    def _scan_main(self) -> None:
        """Note what the hooks recorded since the last look (their slots precede torch's
        entries of the same ops: a hook writes its slot before it calls torch)."""
        end = self.main.next_record
        if end == self._cursor:
            return
        names = self.main.group_names()
        for group, (collectives, p2p) in self.main.collective_keys(self._cursor, end).items():
            name = names.get(group)
            if name is not None:
                hooked = self._hooked.get(name)
                if hooked is None:
                    hooked = self._hooked[name] = HookedSeqs()
                hooked.add(collectives, p2p)
        self._cursor = end

    def read(self) -> str | None:
        """Read torch's FR once and mirror what the rings lack. Returns ``"timeout"`` when
        an op is still running past its detection timeout."""
        started = time.thread_time()
        read_ns = time.time_ns()
        try:
            counters = self._counters()  # before the dump: it holds all these
            self._issued_at_read = sum(counters.values())
            sources = self._read()
            if sources is None:
                return None
            self._scan_main()  # after the dump: every hooked op of it is in the ring now
            missed = self.stats.missed
            for source, entries in sources.items():
                self._take(source, entries)
            self._torch_ops.learn(sources.values(), counters)
            if self.stats.missed > missed:
                self._note_gaps(counters, sources.values())
            self._read_upto.update(counters)
            self._prune()
            self.ring.mark_complete(read_ns)
            self._behind_since_read = False
        finally:
            # the whole pass, not only torch's dump: turning entries into records is
            # CPU this process spends too (CPU, not wall: a pass waiting for the GIL while
            # the training thread runs costs nothing)
            cost = time.thread_time() - started
            self.stats.reads += 1
            self.stats.last_cost_s = cost
            self.stats.recent_costs.append(cost)
            self.stats.total_cost_s += cost
            self._read_at = time.monotonic()
        overdue = self._overdue()
        if overdue is None:
            return None
        self._overdue_seen.add(overdue)
        return "timeout"

    def _take(self, source: str, entries: pa.StructArray) -> None:
        """Mirror the entries newer than the last read, and finish the ops that were
        still running then. Torch's buffer is in record order: the new ones are a tail,
        and only that tail is turned into Python values, column by column."""
        entries, records = _in_record_order(entries)
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
                self._pending[(source, key)] = pending
            self.stats.mirrored += len(rows)
        self._last_fr_record[source] = max(last, records[-1])

    def _note_gaps(self, counters: dict[str, int], dumps: Iterable[pa.StructArray]) -> None:
        """Torch overwrote entries before this read: note, per group, the collectives
        issued since the last read that neither ring holds (the hooks did not record them,
        this dump no longer has them), so that no reader takes them for skipped."""
        held: dict[str, set[int]] = {}
        for entries in dumps:
            column = entries.field
            names = _first_items(column("process_group")).to_pylist()
            for name, seq, p2p in zip(
                names,
                column("collective_seq_id").to_pylist(),
                column("is_p2p").to_pylist(),
                strict=True,
            ):
                if not p2p and seq is not None:
                    held.setdefault(str(name), set()).add(seq)
        for name, count in counters.items():
            start = self._read_upto.get(name, 0) + 1
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
        for key in [k for k in self._pending if k[0] == source]:
            at = bisect_left(records, key[1])
            if at == len(records) or records[at] != key[1]:
                continue  # torch overwrote it: it stays as it was
            entry = entries[at].as_py()
            gloo = _is_gloo(entry.get("profiling_name"))
            if _fr_state(entry.get("state"), entry.get("retired"), gloo) == COMPLETED:
                completed = int(entry.get("time_discovered_completed_ns") or 0)
                self.ring.finish(self._pending[key].record, COMPLETED, completed or None)
                del self._pending[key]

    def _rows(
        self, entries: pa.StructArray, records: list[int]
    ) -> tuple[list[tuple[int, ...]], list[tuple[int, int, _Pending]]]:
        """The torch ring's slots for the entries no hook recorded, and which of them
        still run: (position among the slots, FR record id, its pending op)."""

        column = entries.field
        group_at, group_names = _encoded(_first_items(column("process_group")))
        state_at, state_names = _encoded(column("state"))
        name_at, profiling_names = _encoded(column("profiling_name"))
        # a group's timeout can change while it runs (torch's ``_set_pg_timeout``): each
        # entry says the one it ran under
        timeout_at, _ = _encoded(column("timeout_ms"))
        signature_at, _ = _encoded(_signature_keys(entries))
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

    def _prune(self) -> None:
        """Forget hooked seqs far behind every group's newest (torch's buffer no longer
        holds them, so no read can bring them back). Only once a group holds twice what it
        keeps: a set rebuilt at every look would cost tens of thousands of tuples a look."""
        keep = 4 * self.main.capacity
        for name, seqs in self._hooked.items():
            if len(seqs) > 2 * keep:
                newest = self._read_upto.get(name, 0)
                seqs.forget_before(newest - keep + 1)

    def close(self) -> None:
        self.ring.close()
