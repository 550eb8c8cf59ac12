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


class EntrySpec:
    """Everything an FR entry records that does not change from call to call."""

    __slots__ = (
        "dim",
        "frames",
        "has_events",
        "in_dtypes",
        "in_sizes",
        "is_p2p",
        "op",
        "out_dtypes",
        "out_sizes",
        "profiling_name",
        "thread",
    )

    def __init__(
        self,
        *,
        dim: int,
        op: str,
        profiling_name: str,
        frames: tuple[dict[str, Any], ...],
        in_sizes: Sizes,
        in_dtypes: tuple[str, ...],
        out_sizes: Sizes,
        out_dtypes: tuple[str, ...],
        is_p2p: bool,
        thread: int,
        has_events: bool,
    ) -> None:
        self.dim = dim
        """Which of the recording rank's groups the entry belongs to."""
        self.op = op
        self.profiling_name = profiling_name
        self.frames = frames
        self.in_sizes = in_sizes
        self.in_dtypes = in_dtypes
        self.out_sizes = out_sizes
        self.out_dtypes = out_dtypes
        self.is_p2p = is_p2p
        self.thread = thread
        """0: the main thread, 1: autograd's worker thread."""
        self.has_events = has_events
        """False for ops inside a coalesced batch: NCCL records them without CUDA events,
        so they stay ``scheduled`` and never retire (pytorch#137969)."""


class KernelSpec:
    """One work on a rank's NCCL stream: what the host records and what the GPU waits for."""

    __slots__ = (
        "a2a_extra",
        "compute_ns",
        "cpu_ns",
        "dim",
        "dur_ns",
        "entries",
        "gpu_hang",
        "kind",
        "net_drop",
        "op",
        "parts",
        "sig",
        "site",
        "variants",
    )

    def __init__(
        self,
        *,
        kind: int,
        dim: int = WORLD,
        site: str = "",
        op: str = "",
        entries: tuple[EntrySpec, ...] = (),
        parts: tuple[tuple[int, bool], ...] = (),
        sig: tuple[Any, ...] = (),
        compute_ns: int = 0,
        cpu_ns: int = 0,
        dur_ns: int = 0,
        a2a_extra: int = -1,
    ) -> None:
        self.kind = kind
        self.dim = dim
        self.site = site
        self.op = op
        self.entries = entries
        self.parts = parts
        """P2P/BATCH: ``(peer's group-local rank minus ours, is_send)`` per op."""
        self.sig = sig
        """What must agree across a collective's members for it to complete."""
        self.compute_ns = compute_ns
        """GPU compute the stream runs before this work can start."""
        self.cpu_ns = cpu_ns
        """Host time between the previous issue and this one."""
        self.dur_ns = dur_ns
        self.a2a_extra = a2a_extra
        """all_to_all only (>= 0): extra input rows; 0 when healthy."""
        self.variants: dict[tuple[int, int], EntrySpec] = {}
        """all_to_all only: the entry for each (input rows, output rows) seen so far."""
        self.gpu_hang = False
        """Fault: the compute kernel before this work never finishes."""
        self.net_drop = False
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
        self.k: dict[str, KernelSpec] = {
            "fwd.sp_gather": self.collective(
                TP,
                "fwd.sp_gather",
                "_all_gather_base",
                sp_in,
                sp_out,
                "BFloat16",
                compute_ns=900 * _US,
                cpu_ns=250 * _US,
                dur_ns=tp_ar // 2,
            ),
            "fwd.attn_ar": self.collective(
                TP,
                "fwd.attn_ar",
                "all_reduce",
                full,
                full,
                "BFloat16",
                compute_ns=3 * _MS,
                cpu_ns=600 * _US,
                dur_ns=tp_ar,
            ),
            "fwd.mlp_ar": self.collective(
                TP,
                "fwd.mlp_ar",
                "all_reduce",
                full,
                full,
                "BFloat16",
                compute_ns=4 * _MS,
                cpu_ns=700 * _US,
                dur_ns=tp_ar,
            ),
            "bwd.mlp_ar": self.collective(
                TP,
                "bwd.mlp_ar",
                "all_reduce",
                full,
                full,
                "BFloat16",
                compute_ns=7 * _MS,
                cpu_ns=300 * _US,
                dur_ns=tp_ar,
            ),
            "bwd.attn_ar": self.collective(
                TP,
                "bwd.attn_ar",
                "all_reduce",
                full,
                full,
                "BFloat16",
                compute_ns=6 * _MS,
                cpu_ns=300 * _US,
                dur_ns=tp_ar,
            ),
            "bwd.sp_scatter": self.collective(
                TP,
                "bwd.sp_scatter",
                "_reduce_scatter_base",
                sp_out,
                sp_in,
                "BFloat16",
                compute_ns=1500 * _US,
                cpu_ns=200 * _US,
                dur_ns=tp_ar // 2,
            ),
            "tail.rs_grads0": self.collective(
                DP,
                "tail.rs_grads",
                "_reduce_scatter_base",
                ((b0 * dp,),),
                ((b0,),),
                "Float",
                compute_ns=2 * _MS,
                cpu_ns=800 * _US,
                dur_ns=rs,
            ),
            "tail.rs_grads1": self.collective(
                DP,
                "tail.rs_grads",
                "_reduce_scatter_base",
                ((b1 * dp,),),
                ((b1,),),
                "Float",
                compute_ns=300 * _US,
                cpu_ns=200 * _US,
                dur_ns=rs * b1 // b0,
            ),
            "tail.grad_norm": self.collective(
                WORLD,
                "tail.grad_norm",
                "all_reduce",
                ((1,),),
                ((1,),),
                "Float",
                compute_ns=600 * _US,
                cpu_ns=400 * _US,
                dur_ns=small,
            ),
            "tail.ag_params": self.collective(
                DP,
                "tail.ag_params",
                "_all_gather_base",
                ((b0,),),
                ((b0 * dp,),),
                "BFloat16",
                compute_ns=5 * _MS,
                cpu_ns=3 * _MS,
                dur_ns=rs // 2,
            ),
            "tail.metrics": self.collective(
                WORLD,
                "tail.metrics",
                "all_reduce",
                ((4,),),
                ((4,),),
                "Float",
                compute_ns=200 * _US,
                cpu_ns=300 * _US,
                dur_ns=small,
            ),
        }
        logits: Sizes = ((self.seq, MICRO_BATCH),)
        self.k["fwd.embed"] = self.collective(
            TP,
            "fwd.embed",
            "_reduce_scatter_base",
            sp_out,
            sp_in,
            "BFloat16",
            compute_ns=400 * _US,
            cpu_ns=500 * _US,
            dur_ns=tp_ar // 2,
        )
        self.k["bwd.embed"] = self.collective(
            TP,
            "bwd.embed",
            "_all_gather_base",
            sp_in,
            sp_out,
            "BFloat16",
            compute_ns=800 * _US,
            cpu_ns=200 * _US,
            dur_ns=tp_ar // 2,
        )
        for site, compute in (
            ("fwd.xent_max", 6 * _MS),
            ("fwd.xent_sum", 900 * _US),
            ("fwd.xent_target", 300 * _US),
        ):
            self.k[site] = self.collective(
                TP,
                site,
                "all_reduce",
                logits,
                logits,
                "Float",
                compute_ns=compute,
                cpu_ns=150 * _US,
                dur_ns=60 * _US,
            )
        for site, compute in (
            ("fwd.moe_dispatch", 800 * _US),
            ("fwd.moe_combine", 2500 * _US),
            ("bwd.moe_combine", 1200 * _US),
            ("bwd.moe_dispatch", 4 * _MS),
        ):
            # The entry here is a template: each rank records its own split totals.
            rows: Sizes = ((TOKENS, HIDDEN),)
            k = self.collective(
                DP,
                site,
                "all_to_all",
                rows,
                rows,
                "BFloat16",
                compute_ns=compute,
                cpu_ns=250 * _US,
                dur_ns=a2a,
            )
            k.a2a_extra = 0
            self.k[site] = k
        self.sync = KernelSpec(kind=SYNC, site="loss.item")
        self.p2p_dur = 250 * _US

    def collective_entry(
        self,
        dim: int,
        site: str,
        op: str,
        in_sizes: Sizes,
        out_sizes: Sizes,
        in_dtype: str,
        out_dtype: str | None = None,
    ) -> EntrySpec:
        """The entry of a collective called from ``site``."""
        out_dtype = in_dtype if out_dtype is None else out_dtype
        return EntrySpec(
            dim=dim,
            op=op,
            profiling_name=f"nccl:{op}",
            frames=self.stacks.stack(site, op),
            in_sizes=in_sizes,
            in_dtypes=(in_dtype,) * len(in_sizes),
            out_sizes=out_sizes,
            out_dtypes=(out_dtype,) * len(out_sizes),
            is_p2p=False,
            thread=1 if site in callsites.AUTOGRAD_SITES else 0,
            has_events=True,
        )

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
        out_dtype: str | None = None,
    ) -> KernelSpec:
        entry = self.collective_entry(dim, site, op, in_sizes, out_sizes, dtype, out_dtype)
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

        for mb in range(MICROBATCHES):
            if pp and not first and mb == 0:
                exchange([(-1, False)], 100 * _US)
            if tp and first:
                out.append(k["fwd.embed"])
            for layer in range(LAYERS):
                if tp and layer == 0:
                    out.append(k["fwd.sp_gather"])
                if tp:
                    out.append(k["fwd.attn_ar"])
                if dp and layer == LAYERS - 1:
                    out.extend((k["fwd.moe_dispatch"], k["fwd.moe_combine"]))
                if tp:
                    out.append(k["fwd.mlp_ar"])
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
                if tp:
                    out.append(k["bwd.mlp_ar"])
                if dp and layer == LAYERS - 1:
                    out.extend((k["bwd.moe_combine"], k["bwd.moe_dispatch"]))
                if tp:
                    out.append(k["bwd.attn_ar"])
                if tp and layer == 0:
                    out.append(k["bwd.sp_scatter"])
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
