"""The 3D (tp, pp, dp) device mesh and its process groups, named the way c10d names them.

Ranks are laid out tp fastest, then pp, then dp: ``rank = t + tp * (p + pp * d)``.
Groups are created in the same order on every rank (default_pg, then every tp group, then
every pp group, then every dp group, as ``new_group`` is called for each mesh row), so the
name counter agrees across ranks even though non-members skip the backend. A mesh dimension
of size 1 gets no groups at all: such groups would hold one rank and carry no collectives
worth recording, and DeviceMesh users rarely build them.
"""

from __future__ import annotations

from dataclasses import dataclass

from fr_otel.errors import SimulationError

WORLD, TP, PP, DP = 0, 1, 2, 3
"""Dimension indices used by the program and the engine."""

DIM_NAMES: tuple[str, ...] = ("world", "tp", "pp", "dp")
DIM_DESCS: tuple[str, ...] = ("default_pg", "mesh_tp", "mesh_pp", "mesh_dp")


@dataclass(frozen=True, slots=True)
class ProcessGroup:
    """One process group as every rank's ``pg_config`` describes it."""

    gid: int
    """Dense index in creation order; equals ``int(name)``."""
    name: str
    desc: str
    dim: int
    """``WORLD``, ``TP``, ``PP`` or ``DP``."""
    ranks: tuple[int, ...]
    """Global ranks in group-rank order."""

    @property
    def size(self) -> int:
        return len(self.ranks)

    def ranks_str(self) -> str:
        """``"[0, 1]"``, exactly as ``ranks_str`` in TraceUtils.h formats it."""
        return "[" + ", ".join(str(r) for r in self.ranks) + "]"


@dataclass(frozen=True)
class Mesh:
    """The job's parallel layout and every process group it creates."""

    world: int
    tp: int
    pp: int
    dp: int
    groups: tuple[ProcessGroup, ...]
    rank_groups: tuple[tuple[int, int, int, int], ...]
    """Per global rank: the gid of its group in each dimension, -1 where none exists."""

    def coords(self, rank: int) -> tuple[int, int, int]:
        """``(t, p, d)`` of a global rank."""
        return rank % self.tp, (rank // self.tp) % self.pp, rank // (self.tp * self.pp)

    def rank_at(self, t: int, p: int, d: int) -> int:
        return t + self.tp * (p + self.pp * d)

    def group_of(self, rank: int, dim: int) -> ProcessGroup | None:
        gid = self.rank_groups[rank][dim]
        return None if gid < 0 else self.groups[gid]

    def member_groups(self, rank: int) -> list[ProcessGroup]:
        """The rank's groups in creation order, i.e. in ``pg_id`` order."""
        return [self.groups[g] for g in self.rank_groups[rank] if g >= 0]

    def has_dim(self, dim: int) -> bool:
        return dim == WORLD or (self.tp, self.pp, self.dp)[dim - 1] > 1


def _pp_choices(rem: int) -> list[int]:
    """Preferred pipeline depths for ``rem`` = world / tp ranks, most preferred first."""
    choices: list[int] = []
    if rem >= 16 and rem % 4 == 0:
        choices.append(4)
    if rem >= 4 and rem % 2 == 0:
        choices.append(2)
    choices.append(1)
    # A fault that needs a pipeline may have to accept an odd depth on a tiny world.
    for div in range(2, rem + 1):
        if rem % div == 0:
            if div not in choices:
                choices.append(div)
            break
    return choices


def resolve_layout(
    world: int, tp: int | None, pp: int | None, *, need_pp: bool = False, need_dp: bool = False
) -> tuple[int, int, int]:
    """Fill in ``tp``/``pp`` left as ``None`` and return ``(tp, pp, dp)``.

    ``need_pp``/``need_dp`` steer the automatic choice toward a layout where the fault
    being injected is possible (a pipeline for ``p2p_unmatched``, a data-parallel group
    for ``all_to_all_splits``); explicit sizes are never overridden.
    """
    tp_choices = [tp] if tp is not None else ([2, 1] if world % 2 == 0 else [1])
    for t in tp_choices:
        if world % t:
            continue
        rem = world // t
        pp_choices = [pp] if pp is not None else _pp_choices(rem)
        for p in pp_choices:
            if rem % p:
                continue
            d = rem // p
            if need_pp and p < 2:
                continue
            if need_dp and d < 2:
                continue
            return t, p, d
    needs = "a pipeline (pp >= 2)" if need_pp else "a data-parallel group (dp >= 2)"
    field = "pp" if pp is not None else "tp" if tp is not None else "world"
    raise SimulationError(f"{field}: no (tp, pp, dp) layout of world {world} gives {needs}")


def build_mesh(world: int, tp: int, pp: int, dp: int) -> Mesh:
    """Create every group in c10d creation order and index each rank's membership."""
    if tp * pp * dp != world:
        raise SimulationError(f"world: tp*pp*dp = {tp * pp * dp} != world {world}")
    groups: list[ProcessGroup] = []
    membership = [[-1, -1, -1, -1] for _ in range(world)]

    def add(dim: int, ranks: list[int]) -> None:
        gid = len(groups)
        groups.append(ProcessGroup(gid, str(gid), DIM_DESCS[dim], dim, tuple(ranks)))
        for r in ranks:
            membership[r][dim] = gid

    def at(t: int, p: int, d: int) -> int:
        return t + tp * (p + pp * d)

    add(WORLD, list(range(world)))
    # Row order follows DeviceMesh: mesh shape (dp, pp, tp), swapdims(-1, dim), reshape.
    if tp > 1:
        for d in range(dp):
            for p in range(pp):
                add(TP, [at(t, p, d) for t in range(tp)])
    if pp > 1:
        for d in range(dp):
            for t in range(tp):
                add(PP, [at(t, p, d) for p in range(pp)])
    if dp > 1:
        for t in range(tp):
            for p in range(pp):
                add(DP, [at(t, p, d) for d in range(dp)])
    rank_groups = tuple((m[0], m[1], m[2], m[3]) for m in membership)
    return Mesh(world, tp, pp, dp, tuple(groups), rank_groups)
