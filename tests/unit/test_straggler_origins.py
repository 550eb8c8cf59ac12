"""``stragglers._origins`` against its definition, written out as plainly as it reads
(every rank's set of the ranks it could have inherited from: the implementation before
it, quadratic in the late ranks of a large group): random meshes of late ranks, and one
large group."""

from __future__ import annotations

import random

from fr_otel.analysis.findings import GroupRef
from fr_otel.analysis.stragglers import (
    GroupKey,
    SiteLateness,
    _Candidate,
    _key,
    _origin_key,
    _origins,
)


def _reference(
    late: dict[int, _Candidate],
    near: set[int],
    groups: list[GroupKey],
    with_collectives: set[GroupKey],
) -> set[int]:
    """A rank is an origin when, for every late rank it could have inherited from (late in
    a group where it is on time, or in a group without collectives), that rank could have
    inherited from it too and it ranks above that rank (``_origin_key``)."""
    late_in: dict[GroupKey, list[int]] = {}
    of_rank: dict[int, list[GroupKey]] = {}
    for group in groups:
        members = [rank for rank in group[1] if rank in late]
        if members:
            late_in[group] = members
            for rank in members:
                of_rank.setdefault(rank, []).append(group)
    flagged = {rank: {_key(s.group) for s in c.sites} for rank, c in late.items()}
    explained: dict[int, set[int]] = {}

    def explained_by(rank: int) -> set[int]:
        if rank not in explained:
            explained[rank] = {
                other
                for group in of_rank.get(rank, [])
                if group not in flagged[rank]
                for other in late_in[group]
                if other != rank and (group in flagged[other] or group not in with_collectives)
            }
        return explained[rank]

    return {
        rank
        for rank in near
        if all(
            rank in explained_by(o) and _origin_key(late[rank]) > _origin_key(late[o])
            for o in explained_by(rank)
        )
    }


def _site(rank: int, gid: int, group: GroupRef, excess_ms: float) -> SiteLateness:
    return SiteLateness(
        gid=gid,
        group=group,
        unit=1,
        op="all_reduce",
        rank=rank,
        collectives=100,
        occasions=100,
        late_occasions=95,
        p50_ns=excess_ms * 1e6,
        last=95,
        above=95,
        example_record=0,
        example_seq=0,
        basis="issue",
        clock_offset_ns=0,
        clock_uncertainty_ns=None,
    )


def _case(
    rng: random.Random, world: int, group_ranks: list[list[int]]
) -> tuple[dict[int, _Candidate], set[int], list[GroupKey], set[GroupKey], dict[int, GroupKey]]:
    refs = {
        gid: GroupRef(name=f"g{gid}", desc=None, ranks=ranks, key=gid)
        for gid, ranks in enumerate(group_ranks)
    }
    keys = {gid: _key(ref) for gid, ref in refs.items()}
    with_collectives = {keys[gid] for gid in refs if rng.random() < 0.7}
    late: dict[int, _Candidate] = {}
    for rank in rng.sample(range(world), rng.randint(1, world)):
        mine = [gid for gid, ranks in enumerate(group_ranks) if rank in ranks]
        flagged = [gid for gid in mine if rng.random() < 0.5] or mine[:1]
        late[rank] = _Candidate(
            rank=rank,
            # excess from a few values: ties between ranks are part of what is tested
            sites=[_site(rank, gid, refs[gid], rng.choice((1.0, 2.0, 3.0))) for gid in flagged],
        )
    near = {rank for rank in late if rng.random() < 0.8}
    return late, near, list(dict.fromkeys(keys.values())), with_collectives, keys


def test_origins_agree_with_their_definition_on_random_meshes() -> None:
    rng = random.Random(7)
    named = 0
    for _ in range(400):
        tp = rng.choice((2, 4))
        dp = rng.choice((1, 2, 3))
        world = tp * dp
        groups = [list(range(world))]  # the default group
        groups += [list(range(d * tp, (d + 1) * tp)) for d in range(dp)]  # tp groups
        groups += [list(range(t, world, tp)) for t in range(tp)]  # dp groups
        late, near, keys_list, with_collectives, keys = _case(rng, world, groups)
        expected = _reference(late, near, keys_list, with_collectives)
        assert _origins(late, near, with_collectives, keys) == expected
        named += len(expected)
    assert named > 50, "the cases name origins, not only nobody"


def test_origins_of_thousands_of_late_ranks_in_one_group() -> None:
    """600 late ranks sharing a group without collectives (a pipeline's send/recv
    group), each late in its own pair: the definition lists 360,000 pairs."""
    rng = random.Random(11)
    world = 600
    pairs = [[r, r + 1] for r in range(0, world, 2)]
    refs = {0: GroupRef(name="pp", desc=None, ranks=list(range(world)), key=0)}
    refs.update(
        {
            i + 1: GroupRef(name=f"pair{i}", desc=None, ranks=p, key=i + 1)
            for i, p in enumerate(pairs)
        }
    )
    keys = {gid: _key(ref) for gid, ref in refs.items()}
    with_collectives = {keys[gid] for gid in refs if gid != 0}
    late = {
        rank: _Candidate(
            rank=rank, sites=[_site(rank, rank // 2 + 1, refs[rank // 2 + 1], rng.random())]
        )
        for rank in range(world)
    }
    near = set(late)
    groups = list(keys.values())
    expected = _reference(late, near, groups, with_collectives)
    assert _origins(late, near, with_collectives, keys) == expected
