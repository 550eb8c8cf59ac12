"""Faults as edits to one rank's last training step, plus the ground truth they imply.

A fault never writes an entry or a state directly. It changes what the culprit's host
issues (skip, swap, replace, stop) or how its GPU/network behaves (a work that never
starts, a collective that never completes), and the engine then produces the symptoms:
peers blocked at a sequence number the culprit never reaches, mismatched ops that never
complete, ranks blocked in different groups, and so on.

Targets are chosen by call site with fallbacks, so every fault works on any layout that
has the group it needs: the data-parallel tail when dp > 1, else tensor-parallel ops, else
default_pg. Two groups deadlock against each other only if they share at least two
ranks, so ``cross_pg_deadlock`` swaps a dp (or tp) collective with a default_pg one: a tp
and a dp group share exactly one rank, and swapping their ops only delays the job.
"""

from __future__ import annotations

from dataclasses import dataclass

from fr_otel.errors import SimulationError
from fr_otel.sim.program import (
    BATCH,
    COLL,
    HIDDEN,
    MICRO_BATCH,
    P2P,
    STOP,
    KernelSpec,
    ProgramBuilder,
    Sizes,
)
from fr_otel.sim.spec import FaultTruth, FleetSpec
from fr_otel.sim.topology import DIM_NAMES, DP, PP, TP, WORLD, Mesh, ProcessGroup

_A2A_EXTRA_ROWS = 7
"""Extra input rows the culprit's all_to_all sends: its split sizes no longer add up."""


@dataclass
class FaultPlan:
    """Which rank runs an edited last step, the edit, and what an analyzer should find."""

    rank: int | None
    last_step: list[KernelSpec] | None
    truth: FaultTruth


def default_fault_rank(world: int) -> int:
    """A non-zero rank in the middle of the world (rank 0 is where people look first)."""
    return world // 2 if world > 1 else 0


def _find(step: list[KernelSpec], sites: tuple[str, ...], mesh: Mesh) -> int | None:
    """First index of a collective from the first of ``sites`` that this layout has."""
    for site in sites:
        for i, k in enumerate(step):
            if k.kind == COLL and k.site == site and mesh.has_dim(k.dim):
                return i
    return None


def _coll_count(kernels: list[KernelSpec], dim: int) -> int:
    return sum(1 for k in kernels if k.kind == COLL and k.dim == dim)


def _p2p_count(kernels: list[KernelSpec], dim: int) -> int:
    return sum(1 for k in kernels if k.kind in (P2P, BATCH) and k.dim == dim)


class _Planner:
    def __init__(self, spec: FleetSpec, mesh: Mesh, builder: ProgramBuilder, steps: int) -> None:
        self.spec = spec
        self.mesh = mesh
        self.builder = builder
        self.steps = steps
        self.rank = default_fault_rank(mesh.world) if spec.fault_rank is None else spec.fault_rank
        self.stage = mesh.coords(self.rank)[1]
        self.step = builder.step(self.stage)

    def group(self, dim: int) -> ProcessGroup:
        g = self.mesh.group_of(self.rank, dim)
        if g is None:  # pragma: no cover - targets are only chosen for existing dims
            raise SimulationError(f"fault: rank {self.rank} has no {DIM_NAMES[dim]} group")
        return g

    def seq(self, i: int) -> int:
        """The group's collective_seq_id of ``step[i]`` as every healthy member numbers it.

        Members of a tp or dp group share the culprit's stage and so its step; every stage
        issues the same default_pg collectives. Counting the culprit's unedited step is
        therefore counting the majority's.
        """
        step = self.step
        dim = step[i].dim
        return (self.steps - 1) * _coll_count(step, dim) + _coll_count(step[: i + 1], dim)

    def truth(
        self, i: int, description: str, *, culprits: tuple[int, ...] | None = None
    ) -> FaultTruth:
        k = self.step[i]
        g = self.group(k.dim)
        return FaultTruth(
            kind=self.spec.fault,
            culprit_ranks=(self.rank,) if culprits is None else culprits,
            pg_name=g.name,
            pg_desc=g.desc,
            pg_ranks=g.ranks,
            collective_seq_id=self.seq(i),
            op=k.op,
            description=description,
        )

    def need(self, i: int | None, what: str) -> int:
        if i is None:
            raise SimulationError(
                f"fault: {self.spec.fault} needs {what}, which layout tp={self.mesh.tp} "
                f"pp={self.mesh.pp} dp={self.mesh.dp} does not have at rank {self.rank}"
            )
        return i

    def where(self, i: int) -> str:
        k = self.step[i]
        return f"{k.op} #{self.seq(i)} in {self.group(k.dim).desc} (call site {k.site})"

    # -- the faults ----------------------------------------------------------------------

    def plan(self) -> FaultPlan:
        kind = self.spec.fault
        if kind == "none":
            return FaultPlan(
                None,
                None,
                FaultTruth(
                    kind="none",
                    culprit_ranks=(),
                    pg_name=None,
                    pg_desc=None,
                    pg_ranks=None,
                    collective_seq_id=None,
                    op=None,
                    description="healthy run: every rank finished its program",
                ),
            )
        method = getattr(self, "_" + kind)
        plan: FaultPlan = method()
        return plan

    def _skipped_collective(self) -> FaultPlan:
        i = self.need(
            _find(self.step, ("tail.rs_grads", "tail.grad_norm"), self.mesh),
            "a dp or default_pg collective",
        )
        desc = (
            f"rank {self.rank} skipped {self.where(i)} and went on, so its later sequence"
            " numbers in that group are one behind its peers"
        )
        edited = self.step[:i] + self.step[i + 1 :]
        return FaultPlan(self.rank, edited, self.truth(i, desc))

    def _missing_rank(self) -> FaultPlan:
        i = self.need(
            _find(self.step, ("tail.rs_grads", "fwd.attn_ar", "tail.grad_norm"), self.mesh),
            "a collective",
        )
        desc = f"rank {self.rank} hung in host code before issuing {self.where(i)}"
        edited = [*self.step[:i], KernelSpec(kind=STOP, site="host_hang"), *self.step[i:]]
        return FaultPlan(self.rank, edited, self.truth(i, desc))

    def _replace(
        self, i: int, new: KernelSpec, desc: str, culprits: tuple[int, ...] | None = None
    ) -> FaultPlan:
        edited = list(self.step)
        edited[i] = new
        return FaultPlan(self.rank, edited, self.truth(i, desc, culprits=culprits))

    def _redone(
        self, k: KernelSpec, op: str, in_sizes: Sizes, out_sizes: Sizes, dtype: str
    ) -> KernelSpec:
        """Collective ``k`` issued as ``op`` on other tensors, with ``k``'s timings."""
        return self.builder.collective(
            k.dim,
            k.site,
            op,
            in_sizes,
            out_sizes,
            dtype,
            compute_ns=k.compute_ns,
            cpu_ns=k.cpu_ns,
            dur_ns=k.dur_ns,
        )

    def _op_type_mismatch(self) -> FaultPlan:
        i = self.need(
            _find(self.step, ("tail.rs_grads", "fwd.attn_ar", "tail.grad_norm"), self.mesh),
            "a collective",
        )
        k = self.step[i]
        e = k.entries[0]
        b = self.builder
        if k.op == "_reduce_scatter_base":
            new = self._redone(k, "all_reduce", e.in_sizes, e.in_sizes, "Float")
        elif k.site == "fwd.attn_ar":
            sp_in = ((b.seq // self.mesh.tp, MICRO_BATCH, HIDDEN),)
            sp_out = ((b.seq, MICRO_BATCH, HIDDEN),)
            new = self._redone(k, "_all_gather_base", sp_in, sp_out, "BFloat16")
        else:
            new = self._redone(k, "broadcast", e.in_sizes, e.out_sizes, "Float")
        desc = f"rank {self.rank} issued {new.op} where its peers issued {self.where(i)}"
        return self._replace(i, new, desc)

    def _size_mismatch(self) -> FaultPlan:
        i = self.need(
            _find(self.step, ("tail.rs_grads", "fwd.attn_ar", "tail.grad_norm"), self.mesh),
            "a collective",
        )
        k = self.step[i]
        e = k.entries[0]
        if k.op == "_reduce_scatter_base":
            shard = e.out_sizes[0][0] + 4096
            ins: Sizes = ((shard * self.group(k.dim).size,),)
            outs: Sizes = ((shard,),)
        elif k.site == "fwd.attn_ar":
            ins = outs = ((MICRO_BATCH, self.builder.seq // 2, HIDDEN),)
        else:
            ins = outs = ((2,),)
        new = self._redone(k, k.op, ins, outs, e.in_dtypes[0])
        was = [list(s) for s in e.in_sizes]
        desc = (
            f"rank {self.rank} issued {self.where(i)} with input {list(map(list, ins))}, not {was}"
        )
        return self._replace(i, new, desc)

    def _dtype_mismatch(self) -> FaultPlan:
        i = self.need(
            _find(self.step, ("fwd.attn_ar", "tail.ag_params", "tail.grad_norm"), self.mesh),
            "a collective",
        )
        k = self.step[i]
        e = k.entries[0]
        dtype = "Double" if e.in_dtypes[0] == "Float" else "Float"
        new = self._redone(k, k.op, e.in_sizes, e.out_sizes, dtype)
        desc = f"rank {self.rank} issued {self.where(i)} in {dtype} instead of {e.in_dtypes[0]}"
        return self._replace(i, new, desc)

    def _all_to_all_splits(self) -> FaultPlan:
        i = self.need(
            _find(self.step, ("fwd.moe_dispatch",), self.mesh),
            "an expert-parallel all_to_all (dp >= 2)",
        )
        new = self.step[i].copy()
        new.a2a_extra = _A2A_EXTRA_ROWS
        new.variants = {}
        desc = (
            f"rank {self.rank} sent {_A2A_EXTRA_ROWS} more rows than its split sizes promise in"
            f" {self.where(i)}, so the group's input and output totals differ"
        )
        return self._replace(i, new, desc)

    def _adjacent(self, dims: list[tuple[int, int]]) -> int | None:
        """First i where step[i], step[i+1] are collectives of the given (dim, dim) pairs."""
        step = self.step
        for a, b in dims:
            if not (self.mesh.has_dim(a) and self.mesh.has_dim(b)):
                continue
            for i in range(len(step) - 1):
                x, y = step[i], step[i + 1]
                if (
                    x.kind == COLL
                    and y.kind == COLL
                    and x.dim == a
                    and y.dim == b
                    and (a != b or x.sig != y.sig)
                ):
                    return i
        return None

    def _swap(self, i: int, desc: str) -> FaultPlan:
        edited = list(self.step)
        edited[i], edited[i + 1] = edited[i + 1], edited[i]
        return FaultPlan(self.rank, edited, self.truth(i, desc))

    def _reordered_collectives(self) -> FaultPlan:
        i = self.need(
            self._adjacent([(DP, DP), (TP, TP), (WORLD, WORLD)]),
            "two consecutive collectives of one group",
        )
        nxt = self.step[i + 1]
        desc = f"rank {self.rank} issued {nxt.op} #{self.seq(i + 1)} before {self.where(i)}"
        return self._swap(i, desc)

    def _cross_pg_deadlock(self) -> FaultPlan:
        pairs = [(DP, WORLD), (WORLD, DP), (TP, WORLD), (WORLD, TP)]
        i = self.need(
            self._adjacent(pairs), "consecutive collectives of two groups sharing two or more ranks"
        )
        nxt = self.step[i + 1]
        desc = (
            f"rank {self.rank} issued {nxt.op} #{self.seq(i + 1)} in {self.group(nxt.dim).desc}"
            f" before {self.where(i)}, the opposite order to its peers, so each side waits"
            " in a different group"
        )
        return self._swap(i, desc)

    def _gpu_hang(self) -> FaultPlan:
        i = self.need(
            _find(self.step, ("tail.rs_grads", "fwd.attn_ar", "tail.grad_norm"), self.mesh),
            "a collective",
        )
        new = self.step[i].copy()
        new.gpu_hang = True
        desc = (
            f"rank {self.rank}'s GPU hung in the compute kernel before {self.where(i)},"
            " which was enqueued but never started"
        )
        return self._replace(i, new, desc)

    def _network(self) -> FaultPlan:
        i = self.need(
            _find(self.step, ("tail.rs_grads", "fwd.attn_ar", "tail.grad_norm"), self.mesh),
            "a collective",
        )
        new = self.step[i].copy()
        new.net_drop = True
        desc = f"the network lost {self.where(i)} after every member started it"
        # The edit rides on one member's program only to mark the collective; nobody is to blame.
        return self._replace(i, new, desc, culprits=())

    def _last_recv(self) -> tuple[int, int]:
        """(work index, op index) of the last recv in the culprit's step.

        Skipping the last one keeps the pairing of every earlier send and recv intact (NCCL
        pairs them by order), so exactly one send is left over.
        """
        for i in reversed(range(len(self.step))):
            k = self.step[i]
            if k.kind in (P2P, BATCH):
                for j in reversed(range(len(k.parts))):
                    if not k.parts[j][1]:
                        return i, j
        raise SimulationError(
            f"fault: p2p_unmatched needs a pipeline (pp >= 2); layout has pp={self.mesh.pp}"
        )

    def _p2p_unmatched(self) -> FaultPlan:
        mesh = self.mesh
        i, j = self._last_recv()
        k = self.step[i]
        delta = k.parts[j][0]
        parts = [p for n, p in enumerate(k.parts) if n != j]
        edited = list(self.step)
        if k.kind == BATCH and parts:
            edited[i] = self.builder.batch(
                k.site,
                self.stage,
                parts,
                self.builder.act,
                compute_ns=k.compute_ns,
                cpu_ns=k.cpu_ns,
                dur_ns=k.dur_ns,
            )
        else:
            del edited[i]
        t, p, d = mesh.coords(self.rank)
        sender = mesh.rank_at(t, p + delta, d)
        sender_step = self.builder.step(p + delta)
        last_send = max(
            n
            for n, s in enumerate(sender_step)
            if s.kind in (P2P, BATCH) and any(sd and dl == -delta for dl, sd in s.parts)
        )
        p2p_seq = (self.steps - 1) * _p2p_count(sender_step, PP) + _p2p_count(
            sender_step[: last_send + 1], PP
        )
        g = self.group(PP)
        truth = FaultTruth(
            kind="p2p_unmatched",
            culprit_ranks=(self.rank,),
            pg_name=g.name,
            pg_desc=g.desc,
            pg_ranks=g.ranks,
            collective_seq_id=None,
            op="send",
            p2p_seq_id=p2p_seq,
            description=(
                f"rank {self.rank} (stage {p}) skipped its last recv from stage {p + delta}, "
                f"so rank {sender}'s send with p2p_seq_id {p2p_seq} has no matching recv"
            ),
        )
        return FaultPlan(self.rank, edited, truth)


def plan_fault(spec: FleetSpec, mesh: Mesh, builder: ProgramBuilder, steps: int) -> FaultPlan:
    """Decide the culprit, its edited last step, and the truth for ``spec.fault``."""
    return _Planner(spec, mesh, builder, steps).plan()
