"""The NCCL execution model: hosts enqueue works, streams run them, groups rendezvous.

Each rank has a host (CPU) thread walking its program and one NCCL stream:

* The host issues works asynchronously, recording FR entries at issue time, but never has
  more than ``DEPTH`` works outstanding: issuing work ``j`` waits for work ``j - DEPTH`` to
  complete (the caching allocator and event syncs in real code have the same effect).
  ``SYNC`` (``loss.item()``) waits for the stream to drain; ``STOP`` hangs the host.
* The stream runs works strictly in order. A work starts when it reaches the head of the
  stream and the compute before it has run; that is when the start event fires.
* A collective completes once every member of the group has started the work with the same
  per-group sequence number and the members agree on op, sizes and dtypes (all_to_all:
  input and output totals balance). A send/recv pair completes once both sides started; the
  n-th send from A to B in a group pairs with the n-th recv on B from A, as in NCCL. A batch
  completes when all of its sends and recvs have.

All times are integers (ns) of one true timeline and are computed as maxima of the times
they depend on, so the order in which the worklist visits ranks never changes a result:
the simulation is a max-plus recurrence evaluated lazily. It ends when no rank can make
progress; ranks with unfinished programs are hung, and the watchdog dump time follows from
the oldest stuck work (see ``dump``).
"""

from __future__ import annotations

import gc
import random
from array import array
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fr_otel.sim.program import (
    A2A_OFFSETS,
    COLL,
    P2P,
    STOP,
    SYNC,
    TOKENS,
    EntrySpec,
    KernelSpec,
    a2a_entry,
)
from fr_otel.sim.topology import Mesh

DEPTH = 4
"""Works a host may have outstanding before it blocks on the oldest."""
LAUNCH_NS = 12_000
"""Host enqueue to earliest kernel start."""
BATCH_RECORD_NS = 1_500
"""Host time between consecutive entries of one batch_isend_irecv."""
_JIT_BITS = 12
_JIT_MASK = (1 << _JIT_BITS) - 1


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building millions of acyclic objects.

    Each generation-2 pass walks every live container; with a few million works and entry
    dicts alive that makes simulation and dump building several times slower. Nothing built
    here forms reference cycles, so reference counting frees it all anyway.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Ring:
    """One rank's FR ring buffer, column-wise so 2000 entries cost ~100 KiB, not ~3 MiB."""

    __slots__ = ("cap", "created", "cseq", "done", "opid", "pseq", "rec", "spec", "start")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.rec = 0
        """Entries ever recorded; the next record_id."""
        self.spec: list[EntrySpec | None] = [None] * cap
        zeros = array("q", bytes(8 * cap))
        self.cseq = array("q", zeros)
        self.pseq = array("q", zeros)
        self.opid = array("q", zeros)
        self.created = array("q", zeros)
        self.start = array("q", zeros)
        """GPU start time of the work this entry records, -1 until it starts."""
        self.done = array("q", zeros)
        """GPU completion time, -1 until it completes."""


class Work:
    """One issued work in flight on a stream."""

    __slots__ = (
        "chans",
        "enq",
        "gid",
        "idx",
        "k",
        "left",
        "pdone",
        "peers",
        "rank",
        "rid",
        "rows",
        "start",
        "wseq",
    )

    def __init__(
        self, rank: int, k: KernelSpec, idx: int, rid: int, enq: int, gid: int, wseq: int
    ) -> None:
        # Only what every work needs; P2P and all_to_all fields are set by ``issue``.
        self.rank = rank
        self.k = k
        self.idx = idx
        """Issue index on this rank (counts works, not entries)."""
        self.rid = rid
        """record_id of the entry whose events this work owns."""
        self.enq = enq
        self.gid = gid
        self.wseq = wseq
        """``work.seq_``: the collective or p2p counter the watchdog reports in pg_status."""
        self.start = -1
        self.left: int
        self.pdone: int
        self.peers: tuple[int, ...]
        self.chans: tuple[int, ...]
        self.rows: tuple[int, int]


class RankState:
    """A rank's host, stream, counters and ring."""

    __slots__ = (
        "chans",
        "cnt",
        "completed",
        "cpu_t",
        "done_ring",
        "enq",
        "free_t",
        "gids",
        "issued",
        "last_completed",
        "last_t",
        "loc",
        "pc",
        "prog",
        "queued",
        "ring",
        "started",
        "stream",
        "stuck",
        "used",
    )

    def __init__(
        self,
        prog: list[KernelSpec],
        cap: int,
        gids: tuple[int, int, int, int],
        loc: tuple[int, int, int, int],
    ) -> None:
        self.prog = prog
        self.gids = gids
        """Group id per dim (-1: none)."""
        self.loc = loc
        """Group-local rank per dim."""
        self.pc = 0
        self.cpu_t = 0
        self.free_t = 0
        self.last_t = 0
        self.issued = 0
        self.completed = 0
        self.stuck = False
        self.queued = False
        self.done_ring = [0] * DEPTH
        self.stream: deque[Work] = deque()
        self.ring = Ring(cap)
        self.cnt = [0] * 12
        """Per dim: collective seq [0:4], p2p seq [4:8], op_id [8:12]."""
        self.chans: dict[tuple[int, int, bool], int] = {}
        self.enq = [-1, -1, -1, -1]
        self.started = [-1, -1, -1, -1]
        self.last_completed = [-1, -1, -1, -1]
        self.used = [False, False, False, False]
        """Dims whose communicator exists (first op issued): they appear in pg_config."""


class Rendezvous:
    """A collective waiting for its members."""

    __slots__ = ("bad", "drop", "k", "max_start", "rows_in", "rows_out", "works")

    def __init__(self, k: KernelSpec) -> None:
        self.k = k
        self.works: list[Work] = []
        self.max_start = 0
        self.bad = False
        self.drop = False
        self.rows_in = 0
        self.rows_out = 0


class Engine:
    """Runs every rank's program to completion or to a hang."""

    def __init__(
        self,
        mesh: Mesh,
        programs: list[list[KernelSpec]],
        cap: int,
        seed: int,
        *,
        cpu_delay_ns: dict[int, int] | None = None,
        gpu_delay_ns: dict[int, int] | None = None,
    ) -> None:
        self.mesh = mesh
        world = len(programs)
        # stragglers: extra host time before each issue, extra time before each kernel start
        self.cpu_delay = [(cpu_delay_ns or {}).get(r, 0) for r in range(world)]
        self.gpu_delay = [(gpu_delay_ns or {}).get(r, 0) for r in range(world)]
        self.cap = cap
        tp, pp = mesh.tp, mesh.pp
        self.ranks = [
            RankState(p, cap, mesh.rank_groups[r], (r, r % tp, (r // tp) % pp, r // (tp * pp)))
            for r, p in enumerate(programs)
        ]
        rng = random.Random(f"fr_otel.sim.engine/{seed}")
        self.jit = [rng.random() for _ in range(1 << _JIT_BITS)]
        self.group_ranks = [g.ranks for g in mesh.groups]
        self.gsize = [len(g.ranks) for g in mesh.groups]
        self.coll: dict[tuple[int, int], Rendezvous] = {}
        self.p2p: dict[tuple[int, int, int, int], Work] = {}
        self.hung: list[Rendezvous] = []
        """Collectives whose members all arrived but that can never complete."""
        self.worklist: list[int] = []

    def jitter(self, a: int, b: int) -> float:
        """A deterministic uniform [0, 1) draw for (a, b), independent of visiting order."""
        return self.jit[(a * 40503 + b * 9973) & _JIT_MASK]

    # -- driving -------------------------------------------------------------------------

    def run(self) -> None:
        wl = self.worklist
        for r in reversed(range(len(self.ranks))):
            self.ranks[r].queued = True
            wl.append(r)
        advance = self.advance
        ranks = self.ranks
        while wl:
            r = wl.pop()
            ranks[r].queued = False
            advance(r)

    def advance(self, r: int) -> None:
        """Let rank ``r``'s host and stream run until both wait on someone else."""
        st = self.ranks[r]
        prog = st.prog
        plen = len(prog)
        stream = st.stream
        jit = self.jit
        done_ring = st.done_ring
        issue = self.issue
        cpu_delay = self.cpu_delay[r]
        gpu_delay = self.gpu_delay[r]
        while True:
            progressed = False
            # Host: issue works until blocked. Nothing completes while the host issues,
            # so ``completed`` is stable and the loop can keep its state in locals.
            if not st.stuck:
                pc = st.pc
                completed = st.completed
                while pc < plen:
                    j = st.issued
                    gate = 0
                    if j >= DEPTH:
                        if completed <= j - DEPTH:
                            break
                        gate = done_ring[j % DEPTH]
                    k = prog[pc]
                    kind = k.kind
                    if kind == SYNC:
                        if completed < j:
                            break
                        if st.free_t > st.cpu_t:
                            st.cpu_t = st.free_t
                        pc += 1
                        progressed = True
                        continue
                    if kind == STOP:
                        st.stuck = True
                        break
                    t = (
                        st.cpu_t
                        + int(k.cpu_ns * (0.5 + jit[(r * 40503 + j * 9973) & _JIT_MASK]))
                        + cpu_delay
                    )
                    issue(r, st, k, t if t > gate else gate)
                    pc += 1
                    progressed = True
                st.pc = pc
            # Stream: start the head work once the compute before it has run.
            if stream:
                w = stream[0]
                k = w.k
                if w.start < 0 and not k.gpu_hang:
                    jv = jit[(r * 7919 + w.idx * 104729) & _JIT_MASK]
                    start = st.free_t + int(k.compute_ns * (0.85 + 0.3 * jv)) + gpu_delay
                    if w.enq + LAUNCH_NS > start:
                        start = w.enq + LAUNCH_NS
                    w.start = start
                    if start > st.last_t:
                        st.last_t = start
                    ring = st.ring
                    if ring.rec - w.rid <= ring.cap:
                        ring.start[w.rid % ring.cap] = start
                    started = st.started
                    if w.wseq > started[k.dim]:
                        started[k.dim] = w.wseq
                    if k.kind == COLL:
                        self.arrive_collective(w)
                    else:
                        self.arrive_p2p(w)
                    progressed = True
            if not progressed:
                return

    # -- host side -----------------------------------------------------------------------

    def record(self, ring: Ring, spec: EntrySpec, cseq: int, pseq: int, opid: int, t: int) -> int:
        rid = ring.rec
        slot = rid % ring.cap
        ring.spec[slot] = spec
        ring.cseq[slot] = cseq
        ring.pseq[slot] = pseq
        ring.opid[slot] = opid
        ring.created[slot] = t
        ring.start[slot] = -1
        ring.done[slot] = -1
        ring.rec = rid + 1
        return rid

    def issue(self, r: int, st: RankState, k: KernelSpec, t: int) -> None:
        """Record the work's entries (as ``initWork``/``record`` do) and enqueue it."""
        dim = k.dim
        gid = st.gids[dim]
        cnt = st.cnt
        ring = st.ring
        st.used[dim] = True
        kind = k.kind
        record = self.record
        if kind == COLL:
            cnt[dim] += 1
            cnt[8 + dim] += 1
            wseq = cnt[dim]
            if k.a2a_extra >= 0:
                me = st.loc[dim]
                nvar = len(A2A_OFFSETS)
                rows = (
                    TOKENS + A2A_OFFSETS[me % nvar] + k.a2a_extra,
                    TOKENS + A2A_OFFSETS[((me + 1) % self.gsize[gid]) % nvar],
                )
                spec = a2a_entry(k, rows[0], rows[1])
                rid = record(ring, spec, wseq, cnt[4 + dim], cnt[8 + dim], t)
                w = Work(r, k, st.issued, rid, t, gid, wseq)
                w.rows = rows
            else:
                rid = record(ring, k.entries[0], wseq, cnt[4 + dim], cnt[8 + dim], t)
                w = Work(r, k, st.issued, rid, t, gid, wseq)
        else:
            wseq = cnt[4 + dim] = cnt[4 + dim] + 1
            if kind == P2P:
                cnt[8 + dim] += 1
                rid = record(ring, k.entries[0], cnt[dim], wseq, cnt[8 + dim], t)
            else:  # BATCH: the p2p counter moves once per batch, op_id once per op
                n = len(k.parts)
                for i in range(n):
                    cnt[8 + dim] += 1
                    record(ring, k.entries[i], cnt[dim], wseq, cnt[8 + dim], t)
                    t += BATCH_RECORD_NS
                rid = record(ring, k.entries[n], cnt[dim], wseq, cnt[8 + dim], t)
            w = Work(r, k, st.issued, rid, t, gid, wseq)
            ranks = self.group_ranks[gid]
            me = st.loc[dim]
            peers = []
            chans = []
            for delta, send in k.parts:
                peer = ranks[me + delta]
                key = (gid, peer, send)
                n = st.chans.get(key, 0)
                st.chans[key] = n + 1
                peers.append(peer)
                chans.append(n)
            w.peers = tuple(peers)
            w.chans = tuple(chans)
            w.left = len(peers)
            w.pdone = 0
        st.enq[dim] = wseq
        st.cpu_t = t
        if t > st.last_t:
            st.last_t = t
        st.issued += 1
        st.stream.append(w)

    # -- GPU side ------------------------------------------------------------------------

    def arrive_collective(self, w: Work) -> None:
        key = (w.gid, w.wseq)
        rdv = self.coll.get(key)
        k = w.k
        if rdv is None:
            rdv = Rendezvous(k)
            self.coll[key] = rdv
        elif rdv.k.sig is not k.sig and rdv.k.sig != k.sig:
            rdv.bad = True
        works = rdv.works
        works.append(w)
        if w.start > rdv.max_start:
            rdv.max_start = w.start
        if k.net_drop:
            rdv.drop = True
        if k.a2a_extra >= 0:
            rdv.rows_in += w.rows[0]
            rdv.rows_out += w.rows[1]
        if len(works) < self.gsize[w.gid]:
            return
        del self.coll[key]
        if rdv.bad or rdv.drop or rdv.rows_in != rdv.rows_out:
            self.hung.append(rdv)
            return
        jv = self.jit[((w.gid * 31 + 7) * 40503 + w.wseq * 9973) & _JIT_MASK]
        done = rdv.max_start + int(rdv.k.dur_ns * (0.9 + 0.2 * jv))
        complete = self.complete
        for m in works:
            complete(m, done)

    def arrive_p2p(self, w: Work) -> None:
        pending = self.p2p
        r = w.rank
        gid = w.gid
        for i, (_delta, send) in enumerate(w.k.parts):
            peer = w.peers[i]
            key = (gid, r, peer, w.chans[i]) if send else (gid, peer, r, w.chans[i])
            other = pending.pop(key, None)
            if other is None:
                pending[key] = w
                continue
            jv = self.jitter(gid * 131 + key[1] * 7 + key[2], key[3])
            t = max(w.start, other.start) + int(w.k.dur_ns * (0.9 + 0.2 * jv))
            for x in (w, other):
                x.left -= 1
                if t > x.pdone:
                    x.pdone = t
                if x.left == 0:
                    self.complete(x, x.pdone)

    def complete(self, w: Work, t: int) -> None:
        st = self.ranks[w.rank]
        head = st.stream.popleft()
        if head is not w:  # pragma: no cover - would be an engine bug
            raise AssertionError(f"rank {w.rank}: completed {w.k} but head is {head.k}")
        st.free_t = t
        if t > st.last_t:
            st.last_t = t
        st.done_ring[w.idx % DEPTH] = t
        st.completed += 1
        ring = st.ring
        if ring.rec - w.rid <= ring.cap:
            ring.done[w.rid % ring.cap] = t
        st.last_completed[w.k.dim] = w.wseq
        if not st.queued:
            st.queued = True
            self.worklist.append(w.rank)

    # -- after the run -------------------------------------------------------------------

    def finished(self, r: int) -> bool:
        st = self.ranks[r]
        return st.pc >= len(st.prog) and not st.stream

    def is_hang(self) -> bool:
        return not all(self.finished(r) for r in range(len(self.ranks)))

    def stuck_works(self) -> dict[int, Work]:
        """Per rank with something in flight: its oldest incomplete work."""
        return {r: st.stream[0] for r, st in enumerate(self.ranks) if st.stream}

    def describe(self) -> dict[str, Any]:
        """Small summary for debugging and tests."""
        return {
            "hang": self.is_hang(),
            "stuck_ranks": sorted(self.stuck_works()),
            "hung_collectives": len(self.hung),
            "pending_collectives": len(self.coll),
            "pending_p2p": len(self.p2p),
        }
