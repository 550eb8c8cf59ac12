"""Turning the engine's ring buffers into the dicts torch's ``FlightRecorder::dump`` pickles.

What NCCL's watchdog and ``dump_entries`` do, and therefore what a dump shows:

* The watchdog polls every ``WATCHDOG_TICK_NS``. When it finds a work completed it calls
  ``retire_id``, whose ``update_state`` sets *both* ``time_discovered_started`` (if timing
  is on) and ``time_discovered_completed`` to about that moment, stores ``duration_ms``
  (GPU event time, only with timing) and marks the entry ``retired``.
* ``dump_entries`` runs ``update_state`` on every entry not yet retired, so work that is
  running at dump time shows ``started`` with a discovery time equal to the dump time.
* Entries of ops inside a coalesced batch carry no events: always ``scheduled``, never
  retired. Only the ``nccl:coalesced`` trailer tracks the batch.
* A hang dumps when the first watchdog notices a work older than the timeout; every other
  rank's monitor thread sees the store signal within a second or so and dumps too.

Times in the dump are wall-clock ns on each rank's host clock: the true timeline plus an
epoch plus a per-host skew (8 ranks per host), since FR times are not synchronised.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

from fr_otel.sim.engine import Engine, gc_paused
from fr_otel.sim.program import EntrySpec
from fr_otel.sim.spec import FleetSpec, parse_version
from fr_otel.sim.topology import DIM_DESCS, Mesh

COMM_LIB_VERSION = "2.21.5"
WATCHDOG_TICK_NS = 100_000_000
"""kWatchdogThreadSleepMillis."""
EPOCH_NS = 1_767_225_600 * 1_000_000_000
"""2026-01-01T00:00:00Z; each seed shifts the job start by whole hours."""
RANKS_PER_HOST = 8
MAIN_THREAD = "pt_main_thread"
AUTOGRAD_THREAD = "pt_autograd_0"

_F32 = struct.Struct("f")


def _float32(x: float) -> float:
    """``duration_ms`` is a C++ float widened to double when pickled."""
    value: float = _F32.unpack(_F32.pack(x))[0]
    return value


class DumpBuilder:
    """Everything needed to build any rank's dump on demand after the engine ran."""

    def __init__(self, spec: FleetSpec, mesh: Mesh, engine: Engine) -> None:
        self.spec = spec
        self.mesh = mesh
        self.engine = engine
        self.version = parse_version(spec.version)
        self.epoch = EPOCH_NS + (spec.seed % 8760) * 3_600_000_000_000
        world = mesh.world
        jit = engine.jitter
        hosts = (world + RANKS_PER_HOST - 1) // RANKS_PER_HOST
        skew_ns = spec.clock_skew_ms * 1_000_000
        host_skew = [int((jit(h, 17) - 0.5) * (2 * skew_ns)) for h in range(hosts)]
        self.clock = [self.epoch + host_skew[r // RANKS_PER_HOST] for r in range(world)]
        """Per rank: true time -> that host's wall clock."""
        # Every process group runs its own watchdog thread, each with its own phase.
        self.phase = [
            [int(jit(r * 4 + dim, 23) * WATCHDOG_TICK_NS) for dim in range(4)] for r in range(world)
        ]
        self.threads = [self._thread_ids(r) for r in range(world)]
        self.dump_true = self._dump_times()
        """Per rank: when (true time) its dump was taken."""

    # -- timing --------------------------------------------------------------------------

    def _thread_ids(self, rank: int) -> tuple[str, str]:
        """``std::thread::id`` prints the pthread_t, a 0x7f.. address near a page boundary."""
        jit = self.engine.jitter
        main = 0x7F00_0000_0000 + (int(jit(rank, 29) * (1 << 28)) << 12) + 0x740
        auto = 0x7E00_0000_0000 + (int(jit(rank, 31) * (1 << 28)) << 12) + 0x640
        return str(main), str(auto)

    def tick_after(self, rank: int, dim: int, t: int) -> int:
        """When the watchdog of ``rank``'s group in ``dim`` first looks at or after ``t``."""
        ph = self.phase[rank][dim]
        return ph - (ph - t) // WATCHDOG_TICK_NS * WATCHDOG_TICK_NS

    def _dump_times(self) -> list[int]:
        eng = self.engine
        jit = eng.jitter
        world = self.mesh.world
        ranks = eng.ranks
        if not eng.is_hang():
            # Healthy: an on-demand dump (pipe or API) shortly after the last step.
            base = max(st.last_t for st in ranks) + 1_500_000_000
            times = [base + int(jit(r, 37) * 400_000_000) for r in range(world)]
        else:
            timeout = self.spec.timeout_ms * 1_000_000
            stuck = eng.stuck_works()
            fire_at = {r: self.tick_after(r, w.k.dim, w.enq + timeout) for r, w in stuck.items()}
            first = min(fire_at, key=lambda r: (fire_at[r], r))
            fire = fire_at[first]
            times = []
            for r in range(world):
                if r == first:
                    times.append(fire + 50_000_000 + int(jit(r, 41) * 150_000_000))
                else:
                    # The PG-0 monitor polls the store every second, then dumps.
                    times.append(
                        fire
                        + int(jit(r, 43) * 1_000_000_000)
                        + 100_000_000
                        + int(jit(r, 47) * 300_000_000)
                    )
        # A dump cannot predate what the rank already did (tiny timeouts).
        return [max(t, ranks[r].last_t + 1_000_000) for r, t in enumerate(times)]

    def dump_time_ns(self, rank: int) -> int:
        """Wall-clock time (the rank's host clock) at which its dump file was written."""
        return self.clock[rank] + self.dump_true[rank] + 20_000_000

    # -- building ------------------------------------------------------------------------

    def pg_ids(self, rank: int) -> dict[int, int]:
        """dim -> pg_id: the rank-local count of groups created before this one."""
        out: dict[int, int] = {}
        for n, g in enumerate(self.mesh.member_groups(rank)):
            out[g.dim] = n
        return out

    def build(self, rank: int) -> dict[str, Any]:
        """The dump dict of ``rank``, key for key and type for type as torch pickles it."""
        spec = self.spec
        mesh = self.mesh
        st = self.engine.ranks[rank]
        ring = st.ring
        ver = self.version
        with_threads = ver >= (2, 10)
        timing = spec.timing
        stacks = spec.stack_traces
        timeout_ms = spec.timeout_ms
        clock = self.clock[rank]
        dump_t = self.dump_true[rank]
        dump_wall = clock + dump_t
        pg_id = self.pg_ids(rank)
        groups = [mesh.group_of(rank, dim) for dim in range(4)]
        pg_name: list[tuple[str, str] | None] = [
            None if g is None else (g.name, DIM_DESCS[g.dim]) for g in groups
        ]
        main_tid, auto_tid = self.threads[rank]
        threads = ((MAIN_THREAD, main_tid), (AUTOGRAD_THREAD, auto_tid))
        phase = self.phase[rank]
        # A watchdog pass walks its work list oldest first, a few us per work.
        pass_tick = [-1, -1, -1, -1]
        pass_pos = [0, 0, 0, 0]
        at_dump = 0
        tick_ns = WATCHDOG_TICK_NS

        cap = ring.cap
        first = max(0, ring.rec - cap)
        entries: list[dict[str, Any]] = []
        for rid in range(first, ring.rec):
            slot = rid % cap
            created = ring.created[slot]
            if created > dump_t:
                break  # recorded after the dump: not in this file
            es: EntrySpec | None = ring.spec[slot]
            assert es is not None
            dim = es.dim
            state = "scheduled"
            t_started: int | None = None
            t_completed: int | None = None
            retired = False
            duration: float | None = None
            if es.has_events:
                start = ring.start[slot]
                done = ring.done[slot]
                if 0 <= done <= dump_t:
                    state = "completed"
                    ph = phase[dim]
                    tick = ph - (ph - done) // tick_ns * tick_ns
                    if tick != pass_tick[dim]:
                        pass_tick[dim] = tick
                        pass_pos[dim] = 0
                    pass_pos[dim] += 1
                    seen = tick + 20_000 + pass_pos[dim] * 3_500
                    if seen <= dump_t:
                        retired = True
                        t_completed = clock + seen
                        if timing:
                            duration = _float32((done - start) / 1e6)
                    else:
                        at_dump += 1
                        t_completed = dump_wall + at_dump * 250
                    if timing:
                        # update_state sets "started" first, a moment before "completed".
                        t_started = t_completed - 300 - (rid % 7) * 110
                elif timing and 0 <= start <= dump_t:
                    state = "started"
                    at_dump += 1
                    t_started = dump_wall + at_dump * 250
            tname, tid = threads[es.thread]
            # One dict literal in torch's key order is much faster than 22 assignments;
            # keys this version or setting lacks are deleted below, which keeps the order.
            d: dict[str, Any] = {
                "frames": list(es.frames),
                "record_id": rid,
                "pg_id": pg_id[dim],
                "process_group": pg_name[dim],
                "thread_name": tname,
                "thread_id": tid,
                "collective_seq_id": ring.cseq[slot],
                "p2p_seq_id": ring.pseq[slot],
                "op_id": ring.opid[slot],
                "profiling_name": es.profiling_name,
                "time_created_ns": clock + created,
                "duration_ms": duration,
                "input_sizes": [list(x) for x in es.in_sizes],
                "input_dtypes": list(es.in_dtypes),
                "output_sizes": [list(x) for x in es.out_sizes],
                "output_dtypes": list(es.out_dtypes),
                "state": state,
                "time_discovered_started_ns": t_started,
                "time_discovered_completed_ns": t_completed,
                "retired": retired,
                "timeout_ms": timeout_ms,
                "is_p2p": es.is_p2p,
            }
            if duration is None:
                del d["duration_ms"]
            if not stacks:
                del d["frames"]
            if not with_threads:
                del d["thread_name"], d["thread_id"]
            entries.append(d)

        dump: dict[str, Any] = {"version": spec.version, "pg_config": self.pg_config(rank)}
        if ver >= (2, 10):
            dump["comm_lib_version"] = COMM_LIB_VERSION
        elif ver >= (2, 7):
            dump["nccl_version"] = COMM_LIB_VERSION
        dump["pg_status"] = self.pg_status(rank)
        dump["entries"] = entries
        return dump

    def pg_config(self, rank: int) -> dict[str, dict[str, str]]:
        """Groups whose communicator exists on this rank, in std::map (name string) order."""
        st = self.engine.ranks[rank]
        groups = [g for g in self.mesh.member_groups(rank) if st.used[g.dim]]
        groups.sort(key=lambda g: (g.name, g.desc))
        return {g.name: {"name": g.name, "desc": g.desc, "ranks": g.ranks_str()} for g in groups}

    def pg_status(self, rank: int) -> dict[str, dict[str, int]]:
        """The watchdog's ProcessGroupStatus per pg_id that ever recorded an entry."""
        st = self.engine.ranks[rank]
        timing = self.spec.timing
        out: dict[str, dict[str, int]] = {}
        for dim, pid in sorted(self.pg_ids(rank).items(), key=lambda kv: kv[1]):
            if not st.used[dim]:
                continue
            out[str(pid)] = {
                "last_enqueued_collective": st.enq[dim],
                # isStarted() needs start events, which exist only with timing enabled.
                "last_started_collective": st.started[dim] if timing else -1,
                "last_completed_collective": st.last_completed[dim],
            }
        return out


class FleetDumps(Mapping[int, dict[str, Any]]):
    """Global rank -> dump dict, built on first access.

    Materialising 2048 ranks x 2000 entries as Python dicts would take several GiB, so
    dumps are built on demand from the engine's compact ring buffers and the most recently
    used ``cache_size`` are kept. Building is deterministic: a dump evicted and rebuilt is
    equal to the first one. Edits to a dump survive only while it is cached (always, for
    fleets no larger than ``cache_size``); copy a dump before changing it in a large fleet.
    """

    def __init__(self, builder: DumpBuilder, cache_size: int = 64) -> None:
        self._builder = builder
        self._cache: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._cache_size = cache_size

    def __getitem__(self, rank: int) -> dict[str, Any]:
        if not isinstance(rank, int) or not 0 <= rank < len(self):
            raise KeyError(rank)
        d = self._cache.get(rank)
        if d is None:
            with gc_paused():
                d = self._builder.build(rank)
            self._cache[rank] = d
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(rank)
        return d

    def peek(self, rank: int) -> dict[str, Any]:
        """The cached dump of ``rank`` if there is one, else a fresh one left uncached.

        For one pass over every rank (writing files): it neither evicts dumps a caller
        may have edited nor keeps thousands of built dumps alive.
        """
        d = self._cache.get(rank)
        if d is not None:
            return d
        if not isinstance(rank, int) or not 0 <= rank < len(self):
            raise KeyError(rank)
        with gc_paused():
            return self._builder.build(rank)

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self)))

    def __len__(self) -> int:
        return self._builder.mesh.world

    def dump_time_ns(self, rank: int) -> int:
        """Wall-clock ns at which ``rank`` wrote its dump (the file's mtime)."""
        return self._builder.dump_time_ns(rank)
