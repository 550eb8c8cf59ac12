"""What each rank's training script issues per step, as a list of NCCL works.

A training step for pipeline stage ``p`` (GPipe schedule, ``MICROBATCHES`` microbatches,
``LAYERS`` transformer layers per stage):

* forward, per microbatch: receive activations from stage ``p-1`` (stage 0 instead runs
  the vocab-parallel embedding's ``_reduce_scatter_base``); per layer a sequence-parallel
  ``_all_gather_base`` (first layer only), the attention and MLP tensor parallel
  ``all_reduce`` (BFloat16), and on the last layer an expert-parallel ``all_to_all``
  dispatch/combine pair over the dp group; the last stage adds the vocab-parallel cross
  entropy's three Float ``all_reduce``; then send activations to ``p+1``. The embedding
  and loss ops make first, middle and last stages record different numbers of entries
  per step, so their ring buffers wrap at different record ids, as in real jobs.
  Forward exchanges use ``batch_isend_irecv`` (Megatron's default), each batch pairing this
  microbatch's send with the next microbatch's receive: every op gets its own entry sharing
  one ``p2p_seq_id`` and a ``nccl:coalesced`` trailer closes the batch.
* backward, microbatches reversed: plain ``irecv`` of gradients from ``p+1``, the same
  tensor-parallel and expert-parallel ops in reverse (issued from autograd's thread, so
  recorded with its thread name and a short stack), then plain ``isend`` to ``p-1``
  (stage 0: the embedding's backward ``_all_gather_base``).
* tail: two ``_reduce_scatter_base`` gradient buckets over dp (Float, different sizes), the
  grad-norm ``all_reduce`` over default_pg, the ``_all_gather_base`` of updated parameters
  over dp, the metrics ``all_reduce`` over default_pg, then ``loss.item()`` (a host sync).

Dimensions of size 1 have no groups (see ``topology``), so their ops are simply absent:
a world of 1 runs the two default_pg all_reduces per step and nothing else.

Everything here is immutable and shared: all ranks of one stage run the very same list of
``KernelSpec`` objects, and the engine resolves groups and peers per rank. Only the
culprit of a fault gets a private, edited copy (see ``faults``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fr_otel.sim import callsites
from fr_otel.sim.topology import DP, PP, TP, WORLD, Mesh

# Kernel kinds.
COLL = 0
"""A collective: one entry, completes when every member joined with a matching op."""
P2P = 1
"""A single isend/irecv: one entry, completes when the peer posted the matching op."""
BATCH = 2
"""batch_isend_irecv: one entry per op without events, then a ``coalesced`` trailer."""
SYNC = 3
"""Host waits for the stream to drain (``loss.item()``); records nothing."""
STOP = 4
"""Host code hangs here forever (fault ``missing_rank``); records nothing."""

MICROBATCHES = 4
LAYERS = 2
HIDDEN = 5120
SEQ = 4096
MICRO_BATCH = 1
TOKENS = 8192
"""Tokens routed per expert-parallel all_to_all before per-rank imbalance."""
BUCKETS = (41_943_040, 26_214_400)
"""Gradient shard sizes (elements per dp rank) of the two reduce-scatter buckets."""
A2A_OFFSETS = (0, 96, 32, 160, 64, 224, 16, 128)
"""Per-rank token imbalance of all_to_all inputs; the outputs use a rotation of the same
offsets, so the group's input and output totals always balance."""

_US = 1_000
_MS = 1_000_000

Sizes = tuple[tuple[int, ...], ...]


@dataclass(kw_only=True, slots=True, eq=False, repr=False)
class EntrySpec:
    """Everything an FR entry records that does not change from call to call."""

    dim: int
    """Which of the recording rank's groups the entry belongs to."""
    op: str
    profiling_name: str
    frames: tuple[dict[str, Any], ...]
    in_sizes: Sizes
    in_dtypes: tuple[str, ...]
    out_sizes: Sizes
    out_dtypes: tuple[str, ...]
    is_p2p: bool
    thread: int
    """0: the main thread, 1: autograd's worker thread."""
    has_events: bool
    """False for ops inside a coalesced batch: NCCL records them without CUDA events,
    so they stay ``scheduled`` and never retire (pytorch#137969)."""


@dataclass(kw_only=True, slots=True, eq=False, repr=False)
class KernelSpec:
    """One work on a rank's NCCL stream: what the host records and what the GPU waits for."""

    kind: int
    dim: int = WORLD
    site: str = ""
    op: str = ""
    entries: tuple[EntrySpec, ...] = ()
    parts: tuple[tuple[int, bool], ...] = ()
    """P2P/BATCH: ``(peer's group-local rank minus ours, is_send)`` per op."""
    sig: tuple[Any, ...] = ()
    """What must agree across a collective's members for it to complete."""
    compute_ns: int = 0
    """GPU compute the stream runs before this work can start."""
    cpu_ns: int = 0
    """Host time between the previous issue and this one."""
    dur_ns: int = 0
    a2a_extra: int = -1
    """all_to_all only (>= 0): extra input rows; 0 when healthy."""
    variants: dict[tuple[int, int], EntrySpec] = field(init=False, default_factory=dict)
    """all_to_all only: the entry for each (input rows, output rows) seen so far."""
    gpu_hang: bool = field(init=False, default=False)
    """Fault: the compute kernel before this work never finishes."""
    net_drop: bool = field(init=False, default=False)
    """Fault: the network loses this collective after every member started it."""

    def copy(self) -> KernelSpec:
        """A private copy for a culprit's edited program."""
        k = KernelSpec(
            kind=self.kind,
            dim=self.dim,
            site=self.site,
            op=self.op,
            entries=self.entries,
            parts=self.parts,
            sig=self.sig,
            compute_ns=self.compute_ns,
            cpu_ns=self.cpu_ns,
            dur_ns=self.dur_ns,
            a2a_extra=self.a2a_extra,
        )
        k.gpu_hang = self.gpu_hang
        k.net_drop = self.net_drop
        return k

    def __repr__(self) -> str:
        return f"KernelSpec({self.site} {self.op} dim={self.dim} kind={self.kind})"


def a2a_entry(kernel: KernelSpec, rows_in: int, rows_out: int) -> EntrySpec:
    """The all_to_all entry for one rank's split totals, shared between ranks that agree."""
    key = (rows_in, rows_out)
    e = kernel.variants.get(key)
    if e is None:
        t = kernel.entries[0]
        e = EntrySpec(
            dim=t.dim,
            op=t.op,
            profiling_name=t.profiling_name,
            frames=t.frames,
            in_sizes=((rows_in, HIDDEN),),
            in_dtypes=t.in_dtypes,
            out_sizes=((rows_out, HIDDEN),),
            out_dtypes=t.out_dtypes,
            is_p2p=False,
            thread=t.thread,
            has_events=True,
        )
        kernel.variants[key] = e
    return e


def _log2(n: int) -> float:
    return math.log2(n) if n > 1 else 0.0


class ProgramBuilder:
    """Builds one step's kernels per pipeline stage, sharing every kernel it can."""

    def __init__(self, mesh: Mesh) -> None:
        self.mesh = mesh
        self.stacks = callsites.Stacks()
        tp, dp = mesh.tp, mesh.dp
        self.seq = -(-SEQ // tp) * tp
        self.act = (self.seq // tp, MICRO_BATCH, HIDDEN)
        """Activation shape sent between stages ([s/tp, b, h] with sequence parallelism)."""
        full: Sizes = ((MICRO_BATCH, self.seq, HIDDEN),)
        sp_in: Sizes = ((self.seq // tp, MICRO_BATCH, HIDDEN),)
        sp_out: Sizes = ((self.seq, MICRO_BATCH, HIDDEN),)
        tp_ar = 300 * _US + int(40 * _US * _log2(tp))
        a2a = 500 * _US + int(150 * _US * _log2(dp))
        rs = 6 * _MS + int(1_500 * _US * _log2(dp))
        small = 30 * _US + int(12 * _US * _log2(mesh.world))
        b0, b1 = BUCKETS
        shard0, shard1, params = ((b0 * dp,),), ((b1 * dp,),), ((b0,),)
        logits: Sizes = ((self.seq, MICRO_BATCH),)
        rows: Sizes = ((TOKENS, HIDDEN),)
        ag_op, rs_op = "_all_gather_base", "_reduce_scatter_base"
        ar_op, a2a_op = "all_reduce", "all_to_all"
        bf16, f32 = "BFloat16", "Float"
        # Per kernel: group, op, input and output sizes, dtype, the GPU compute before it and
        # the host time before its issue (µs), its duration (ns). A trailing digit numbers the
        # kernels of one call site. The order is the order call-site stacks are made in.
        table: dict[str, tuple[int, str, Sizes, Sizes, str, int, int, int]] = {
            "fwd.sp_gather": (TP, ag_op, sp_in, sp_out, bf16, 900, 250, tp_ar // 2),
            "fwd.attn_ar": (TP, ar_op, full, full, bf16, 3_000, 600, tp_ar),
            "fwd.mlp_ar": (TP, ar_op, full, full, bf16, 4_000, 700, tp_ar),
            "bwd.mlp_ar": (TP, ar_op, full, full, bf16, 7_000, 300, tp_ar),
            "bwd.attn_ar": (TP, ar_op, full, full, bf16, 6_000, 300, tp_ar),
            "bwd.sp_scatter": (TP, rs_op, sp_out, sp_in, bf16, 1_500, 200, tp_ar // 2),
            "tail.rs_grads0": (DP, rs_op, shard0, ((b0,),), f32, 2_000, 800, rs),
            "tail.rs_grads1": (DP, rs_op, shard1, ((b1,),), f32, 300, 200, rs * b1 // b0),
            "tail.grad_norm": (WORLD, ar_op, ((1,),), ((1,),), f32, 600, 400, small),
            "tail.ag_params": (DP, ag_op, params, shard0, bf16, 5_000, 3_000, rs // 2),
            "tail.metrics": (WORLD, ar_op, ((4,),), ((4,),), f32, 200, 300, small),
            "fwd.embed": (TP, rs_op, sp_out, sp_in, bf16, 400, 500, tp_ar // 2),
            "bwd.embed": (TP, ag_op, sp_in, sp_out, bf16, 800, 200, tp_ar // 2),
            "fwd.xent_max": (TP, ar_op, logits, logits, f32, 6_000, 150, 60 * _US),
            "fwd.xent_sum": (TP, ar_op, logits, logits, f32, 900, 150, 60 * _US),
            "fwd.xent_target": (TP, ar_op, logits, logits, f32, 300, 150, 60 * _US),
            # all_to_all entries are templates: each rank records its own split totals
            "fwd.moe_dispatch": (DP, a2a_op, rows, rows, bf16, 800, 250, a2a),
            "fwd.moe_combine": (DP, a2a_op, rows, rows, bf16, 2_500, 250, a2a),
            "bwd.moe_combine": (DP, a2a_op, rows, rows, bf16, 1_200, 250, a2a),
            "bwd.moe_dispatch": (DP, a2a_op, rows, rows, bf16, 4_000, 250, a2a),
        }
        self.k: dict[str, KernelSpec] = {}
        for key, (dim, op, ins, outs, dtype, compute_us, cpu_us, dur_ns) in table.items():
            kernel = self.collective(
                dim,
                key.rstrip("0123456789"),
                op,
                ins,
                outs,
                dtype,
                compute_ns=compute_us * _US,
                cpu_ns=cpu_us * _US,
                dur_ns=dur_ns,
            )
            if op == a2a_op:
                kernel.a2a_extra = 0
            self.k[key] = kernel
        self.sync = KernelSpec(kind=SYNC, site="loss.item")
        self.p2p_dur = 250 * _US

    def collective(
        self,
        dim: int,
        site: str,
        op: str,
        in_sizes: Sizes,
        out_sizes: Sizes,
        dtype: str,
        *,
        compute_ns: int,
        cpu_ns: int,
        dur_ns: int,
    ) -> KernelSpec:
        """A collective called from ``site``, its one entry with ``dtype`` in and out."""
        entry = EntrySpec(
            dim=dim,
            op=op,
            profiling_name=f"nccl:{op}",
            frames=self.stacks.stack(site, op),
            in_sizes=in_sizes,
            in_dtypes=(dtype,) * len(in_sizes),
            out_sizes=out_sizes,
            out_dtypes=(dtype,) * len(out_sizes),
            is_p2p=False,
            thread=1 if site in callsites.AUTOGRAD_SITES else 0,
            has_events=True,
        )
        return KernelSpec(
            kind=COLL,
            dim=dim,
            site=site,
            op=op,
            entries=(entry,),
            sig=self.signature(entry),
            compute_ns=compute_ns,
            cpu_ns=cpu_ns,
            dur_ns=dur_ns,
        )

    @staticmethod
    def signature(entry: EntrySpec) -> tuple[Any, ...]:
        """What members must agree on; all_to_all only needs the op and dtypes to line up."""
        if entry.op == "all_to_all":
            return (entry.op, entry.in_dtypes, entry.out_dtypes)
        return (entry.op, entry.in_sizes, entry.out_sizes, entry.in_dtypes, entry.out_dtypes)

    def p2p_entry(
        self, site: str, send: bool, me: int, peer: int, shape: tuple[int, ...], batched: bool
    ) -> EntrySpec:
        """A send/recv entry; NCCL names it with group-local ranks, recording rank first."""
        op = "send" if send else "recv"
        name = f"nccl:send {me}->{peer}" if send else f"nccl:recv {me}<-{peer}"
        api = ("batch_" + op) if batched else op
        return EntrySpec(
            dim=PP,
            op=op,
            profiling_name=name,
            frames=self.stacks.stack(site, api),
            in_sizes=(shape,),
            in_dtypes=("BFloat16",),
            out_sizes=(shape,),
            out_dtypes=("BFloat16",),
            is_p2p=True,
            thread=0,
            has_events=not batched,
        )

    def coalesced_trailer(self, site: str) -> EntrySpec:
        """The ``endCoalescing`` work closing a batch: no tensors, but real CUDA events."""
        return EntrySpec(
            dim=PP,
            op="coalesced",
            profiling_name="nccl:coalesced",
            frames=self.stacks.stack(site, "coalesced"),
            in_sizes=(),
            in_dtypes=(),
            out_sizes=(),
            out_dtypes=(),
            is_p2p=True,
            thread=0,
            has_events=True,
        )

    def batch(
        self,
        site: str,
        stage: int,
        ops: list[tuple[int, bool]],
        shape: tuple[int, ...],
        *,
        compute_ns: int,
        cpu_ns: int,
        dur_ns: int,
    ) -> KernelSpec:
        """A batch_isend_irecv of ``ops`` = ``[(peer delta, is_send), ...]`` on the pp group."""
        entries = tuple(
            self.p2p_entry(site, send, stage, stage + delta, shape, True) for delta, send in ops
        )
        return KernelSpec(
            kind=BATCH,
            dim=PP,
            site=site,
            op="coalesced",
            entries=(*entries, self.coalesced_trailer(site)),
            parts=tuple(ops),
            compute_ns=compute_ns,
            cpu_ns=cpu_ns,
            dur_ns=dur_ns,
        )

    def single_p2p(
        self,
        site: str,
        stage: int,
        delta: int,
        send: bool,
        shape: tuple[int, ...],
        *,
        compute_ns: int,
        cpu_ns: int,
        dur_ns: int,
    ) -> KernelSpec:
        entry = self.p2p_entry(site, send, stage, stage + delta, shape, False)
        return KernelSpec(
            kind=P2P,
            dim=PP,
            site=site,
            op=entry.op,
            entries=(entry,),
            parts=((delta, send),),
            compute_ns=compute_ns,
            cpu_ns=cpu_ns,
            dur_ns=dur_ns,
        )

    def step(self, stage: int) -> list[KernelSpec]:
        """One training step's works for ranks at pipeline ``stage``, in issue order."""
        mesh = self.mesh
        k = self.k
        tp, pp, dp = mesh.tp > 1, mesh.pp > 1, mesh.dp > 1
        first, last = stage == 0, stage == mesh.pp - 1
        out: list[KernelSpec] = []

        def exchange(ops: list[tuple[int, bool]], compute: int) -> None:
            if ops:
                out.append(
                    self.batch(
                        "fwd.p2p",
                        stage,
                        ops,
                        self.act,
                        compute_ns=compute,
                        cpu_ns=150 * _US,
                        dur_ns=self.p2p_dur,
                    )
                )

        def layer_works(phase: str, layer: int) -> list[KernelSpec]:
            """One layer's works in forward order; the backward pass issues them reversed."""
            sites = []
            if tp and layer == 0:
                sites.append("sp_gather" if phase == "fwd" else "sp_scatter")
            if tp:
                sites.append("attn_ar")
            if dp and layer == LAYERS - 1:
                sites += ("moe_dispatch", "moe_combine")
            if tp:
                sites.append("mlp_ar")
            return [k[f"{phase}.{site}"] for site in sites]

        for mb in range(MICROBATCHES):
            if pp and not first and mb == 0:
                exchange([(-1, False)], 100 * _US)
            if tp and first:
                out.append(k["fwd.embed"])
            for layer in range(LAYERS):
                out.extend(layer_works("fwd", layer))
            if tp and last:
                out.extend((k["fwd.xent_max"], k["fwd.xent_sum"], k["fwd.xent_target"]))
            if pp:
                ops: list[tuple[int, bool]] = []
                if not last:
                    ops.append((1, True))
                if not first and mb + 1 < MICROBATCHES:
                    ops.append((-1, False))
                exchange(ops, 1500 * _US)
        for _mb in reversed(range(MICROBATCHES)):
            if pp and not last:
                out.append(
                    self.single_p2p(
                        "bwd.recv",
                        stage,
                        1,
                        False,
                        self.act,
                        compute_ns=200 * _US,
                        cpu_ns=200 * _US,
                        dur_ns=self.p2p_dur,
                    )
                )
            for layer in reversed(range(LAYERS)):
                out.extend(reversed(layer_works("bwd", layer)))
            if tp and first:
                out.append(k["bwd.embed"])
            if pp and not first:
                out.append(
                    self.single_p2p(
                        "bwd.send",
                        stage,
                        -1,
                        True,
                        self.act,
                        compute_ns=2 * _MS,
                        cpu_ns=150 * _US,
                        dur_ns=self.p2p_dur,
                    )
                )
        if dp:
            out.extend((k["tail.rs_grads0"], k["tail.rs_grads1"]))
        out.append(k["tail.grad_norm"])
        if dp:
            out.append(k["tail.ag_params"])
        out.append(k["tail.metrics"])
        out.append(self.sync)
        return out


def entries_per_step(step: list[KernelSpec]) -> int:
    """FR entries one step records (a batch records one per op plus its trailer)."""
    n = 0
    for k in step:
        if k.kind in (COLL, P2P):
            n += 1
        elif k.kind == BATCH:
            n += len(k.entries)
    return n
