"""The fault scenarios of the gloo demo job and the ground truth each one should produce.

This module is pure data and imports no torch, so the CLI, the tests and the analysis code
can read the ground truth without a torch install. The code that actually runs a scenario
lives in :mod:`fr_otel.demo._worker` (inside each rank) and :mod:`fr_otel.demo.gloo_job`
(the launcher).

Every scenario runs the same warm-up "training step" first (see ``_worker.warm_up``), so the
per-group sequence numbers at the fault are fixed and independent of the world size:

* ``default_pg`` (all ranks): all_reduce, all_gather_into_tensor, broadcast,
  reduce_scatter_tensor, all_to_all_single, then a closing all_reduce: seq ids 1..6.
  Between the broadcast and the reduce_scatter, rank 0 sends to rank 1: gloo does not
  record it, but it shifts ``op_id`` by one on those two ranks.
* ``front_group`` (ranks ``0 .. world-2``): all_reduce, all_gather: seq ids 1..2.
* ``back_group`` (ranks ``1 .. world-1``): all_reduce, all_gather: seq ids 1..2.

So the first collective after the warm-up is seq 7 in ``default_pg`` and seq 3 in either
subgroup. Both subgroups exclude one rank, so a subgroup fault is invisible to that rank.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from fr_otel.sim.spec import FAULT_KINDS

#: ``group_desc`` of the subgroup made of ranks ``0 .. world-2``.
FRONT_GROUP = "front_group"
#: ``group_desc`` of the subgroup made of ranks ``1 .. world-1``.
BACK_GROUP = "back_group"
#: The default process group's desc, as torch records it.
DEFAULT_PG = "default_pg"

#: Collectives each rank issues in ``default_pg`` during the warm-up.
WARMUP_DEFAULT_OPS = 6
#: Collectives each member issues in ``front_group`` / ``back_group`` during the warm-up.
WARMUP_SUBGROUP_OPS = 2

#: Smallest and largest world a scenario may run with. Three ranks is the least that gives a
#: majority against one culprit; more than eight only slows a 2-core machine down.
MIN_WORLD = 3
MAX_WORLD = 8


@dataclass(kw_only=True, frozen=True)
class Scenario:
    """One injected fault and the diagnosis a correct analysis must reach.

    ``culprit_ranks`` are global ranks and are valid for every world from ``MIN_WORLD`` up,
    so ``world`` is only the default size. ``collective_seq_id`` is the per-group sequence
    number that the majority of the group's ranks recorded for the first collective where
    the ranks diverge; ``pg_desc`` names that group.
    """

    name: str
    description: str
    world: int
    culprit_ranks: tuple[int, ...]
    pg_desc: str | None
    collective_seq_id: int | None
    expected_kind: str
    """The fault injected, named as the simulator names its faults (``fr_otel.sim.FAULT_KINDS``:
    one vocabulary for simulated and real faults). The analysis reports it as the finding
    kind of the same name, except ``all_to_all_splits`` (a ``size_mismatch``); ``none`` is a
    healthy job."""

    def __post_init__(self) -> None:
        if self.expected_kind not in FAULT_KINDS:
            raise ValueError(f"expected_kind {self.expected_kind!r} is not one of {FAULT_KINDS}")
        if not MIN_WORLD <= self.world <= MAX_WORLD:
            raise ValueError(f"world {self.world} is outside {MIN_WORLD}..{MAX_WORLD}")
        if any(not 0 <= r < MIN_WORLD for r in self.culprit_ranks):
            # Culprits must exist in the smallest world so that ``world=`` can be overridden.
            raise ValueError(f"culprit_ranks {self.culprit_ranks} must be below {MIN_WORLD}")

    def as_dict(self) -> dict[str, Any]:
        """The ground truth as JSON-ready values (the tuple becomes a list)."""
        d = asdict(self)
        d["culprit_ranks"] = list(self.culprit_ranks)
        return d


_FAULT_SEQ = WARMUP_DEFAULT_OPS + 1
_SUB_FAULT_SEQ = WARMUP_SUBGROUP_OPS + 1

#: What each scenario does, in words.
_DESCRIPTIONS = {
    "healthy": (
        "No fault: warm-up in default_pg and both subgroups, one more all_reduce, "
        "every collective completes on every rank."
    ),
    "skipped_collective": (
        "Rank 1 skips the gradient all_reduce (seq 7) and goes on to the all_gather, so "
        "its default_pg sequence numbers run one behind its peers' (its seq 7 is the "
        "peers' seq 8)."
    ),
    "skipped_in_subgroup": (
        "Inside back_group (ranks 1..world-1) rank 2 skips an all_reduce (back_group "
        "seq 3) and issues the following all_gather. Rank 0, outside back_group, has "
        "moved on to the next default_pg all_reduce (seq 7) that nobody else reaches: "
        "a secondary symptom, not the cause."
    ),
    "missing_rank": (
        "Rank 0 is stuck in host code (think: a checkpoint write) and never issues the "
        "default_pg all_reduce (seq 7) that every other rank is waiting in."
    ),
    "op_type_mismatch": (
        "Rank 2 calls all_gather_into_tensor where its peers call all_reduce "
        "(default_pg seq 7), on the same 1024-float input."
    ),
    "size_mismatch": (
        "Rank 1 all_reduces a 1000-element tensor where its peers all_reduce 1024 "
        "elements (default_pg seq 7)."
    ),
    "dtype_mismatch": (
        "Rank 2 all_reduces a BFloat16 tensor where its peers use Float (default_pg "
        "seq 7), same shape."
    ),
    "all_to_all_splits": (
        "all_to_all_single (default_pg seq 7) where rank 1 routes one extra element to "
        "rank 0: its input splits sum to 2*world+1 while every rank expects 2 elements "
        "from each peer. FR records totals only, so rank 1's entry shows input "
        "2*world+1 against output 2*world."
    ),
    "reordered_collectives": (
        "Peers issue all_reduce (seq 7) then all_gather_into_tensor (seq 8) in "
        "default_pg; rank 2 issues the same two in swapped order."
    ),
}

# name, default world, culprit ranks, group and sequence number of the first collective
# where the ranks diverge, fault kind
_GROUND_TRUTH: tuple[tuple[str, int, tuple[int, ...], str | None, int | None, str], ...] = (
    ("healthy", 4, (), None, None, "none"),
    ("skipped_collective", 4, (1,), DEFAULT_PG, _FAULT_SEQ, "skipped_collective"),
    ("skipped_in_subgroup", 4, (2,), BACK_GROUP, _SUB_FAULT_SEQ, "skipped_collective"),
    ("missing_rank", 3, (0,), DEFAULT_PG, _FAULT_SEQ, "missing_rank"),
    ("op_type_mismatch", 3, (2,), DEFAULT_PG, _FAULT_SEQ, "op_type_mismatch"),
    ("size_mismatch", 3, (1,), DEFAULT_PG, _FAULT_SEQ, "size_mismatch"),
    ("dtype_mismatch", 3, (2,), DEFAULT_PG, _FAULT_SEQ, "dtype_mismatch"),
    ("all_to_all_splits", 4, (1,), DEFAULT_PG, _FAULT_SEQ, "all_to_all_splits"),
    ("reordered_collectives", 3, (2,), DEFAULT_PG, _FAULT_SEQ, "reordered_collectives"),
)

_ALL = tuple(
    Scenario(
        name=name,
        description=_DESCRIPTIONS[name],
        world=world,
        culprit_ranks=culprits,
        pg_desc=pg_desc,
        collective_seq_id=seq,
        expected_kind=kind,
    )
    for name, world, culprits, pg_desc, seq, kind in _GROUND_TRUTH
)

#: Every scenario by name, in a stable order (healthy first).
SCENARIOS: dict[str, Scenario] = {s.name: s for s in _ALL}
