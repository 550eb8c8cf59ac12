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
its ring files. It also learns torch's name for each op the hooks record
(``torch_ops.TorchOps``): the hooks see the function called, torch's FR the op that ran,
and rows of both meet. This module decides when to read; ``torch_fr`` reads torch's FR as
columns, and ``mirror_rows`` writes what a read brings into the torch ring.

Reading FR costs the training thread: torch's dump functions hold the GIL while they
serialise the buffer (tens of milliseconds for torch's default 2,000 entries, during
which no other Python thread runs). So the mirror reads it only when torch's counters say
it holds ops the ring lacks, and then at most once per ``COST_FACTOR`` times the recent
reads' cost: the stall stays a small, fixed share of wall time, whatever the buffer's
size. What the mirror adds to torch's dump is kept small: the dump is decoded
into columns by the import's C decoder, and only the entries newer than the last read
become Python values (``mirror_rows``), about half the work of taking the dump as dicts.
Asking a group's counter is cheap and holds nothing, so the mirror asks before it reads.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fr_otel.recorder.hooked_seqs import HookedSeqs
from fr_otel.recorder.mirror_rows import MirrorRows
from fr_otel.recorder.mirror_stats import MirrorStats
from fr_otel.recorder.ring import GroupInfo, RingWriter
from fr_otel.recorder.torch_fr import torch_fr_entries
from fr_otel.recorder.torch_ops import TorchOps
from fr_otel.recorder.triggers import POLL_S

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
brought (torch's counters say how many, cheaply). Each read costs the whole buffer (torch
serialises all of it), so the CPU per collective goes as 1 / share: reads planned from a
observed rate must leave room for a burst, and in DDP runs came at little more than half
the buffer, each entry paying for well over its own dump. What is left (300 of
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
EARLY_LOOK = 1.5
"""Continuous mode: when the buffer would reach ``FILL_SHARE`` within this many watch polls
at the rate of the last one, the look waits for that moment and reads then, rather than
trusting the next look (a poll comes late when the GIL is busy)."""
DETECT_SHARE = 3
"""A group's detection timeout has at least this many reads (``MAX_INTERVAL_S``)."""


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return True


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
        self._read = read
        self.stats = MirrorStats()
        self._cursor = 0
        """Main-ring records before it are in ``_hooked``."""
        self._hooked: dict[str, HookedSeqs] = {}
        """Group name -> the ops the hooks recorded."""
        self._torch_ops = TorchOps(main)
        self._read_upto: dict[str, int] = {}
        """Group name -> every collective up to this seq is in one of the two rings (the
        group's count at the last read, or later ones all hooked)."""
        self._read_at = float("-inf")
        """When the last read ended (monotonic): the next is due an ``_interval()`` later,
        as that interval stands at each look (or sooner, in continuous mode, once torch's
        buffer fills)."""
        self._overdue_seen: set[tuple[str, int]] = set()
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
        self.rows = MirrorRows(
            ring=self.ring,
            stats=self.stats,
            hooked=self._hooked,
            groups=groups,
            describe=describe,
            timeout_s=timeout_s,
        )

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

    def issued(self) -> int:
        """Collectives the groups have issued so far, all groups together."""
        return sum(self._counters().values())

    def learning(self) -> bool:
        """Does a hooked signature still wait for its torch op (``TorchOps``)? Until it
        has it, this rank's rows name the function called where its peers' may already
        name torch's op, which an analysis of the rings reads as different ops."""
        return self._torch_ops.waiting()

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
                for key, p in self.rows.pending.items()
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
        shortest = self.rows.shortest_timeout_ns
        if shortest:
            ceiling = min(ceiling, shortest / 1e9 / DETECT_SHARE)
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
                self.rows.take(source, entries)
            self._torch_ops.learn(sources.values(), counters)
            if self.stats.missed > missed:
                self.rows.note_gaps(counters, sources.values(), self._read_upto)
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
