"""``live.stall``: who waits, who lags, and when that is a suspect. Heads are made here as
the rings would give them; the real jobs are in tests/integration/test_live_stalls.py."""

from __future__ import annotations

from fr_otel.live.heads import Head
from fr_otel.live.stall import STEP_MULTIPLE, StallWatch

S = 1_000_000_000
T0 = 1_800_000_000 * S


def head(
    rank: int,
    seq: int,
    at_s: float,
    *,
    group: str = "0",
    members: tuple[int, ...] = (0, 1, 2),
    mirrored: bool = False,
    op: str = "all_reduce",
) -> Head:
    return Head(
        rank=rank,
        group=group,
        seq=seq,
        fingerprint=(op,),
        op=op,
        site=None if mirrored else "train.py:9 in step",
        created_ns=T0 + int(at_s * S),
        members=members,
        group_key=f"{group}|{','.join(map(str, members))}",
        group_desc="default_pg" if group == "0" else None,
        mirrored=mirrored,
    )


def never(rank: int) -> int:
    return 0


def test_a_laggard_is_named_past_the_threshold_once_and_not_before() -> None:
    watch = StallWatch(threshold_s=30)
    watch.add([head(r, 1, 0.0) for r in (0, 1, 2)])
    watch.add([head(0, 2, 1.0), head(2, 2, 1.5)])  # rank 1 does not issue #2
    assert watch.check(T0 + 30 * S, {0, 1, 2}, never) == []  # 29 s: under
    [stall] = watch.check(T0 + 32 * S, {0, 1, 2}, never)
    assert (stall.laggards, stall.waiting, stall.seq, stall.op) == ((1,), (0, 2), 2, "all_reduce")
    assert stall.since_ns == T0 + 1 * S and stall.waited_s == 31.0
    assert stall.group_desc == "default_pg" and stall.site == "train.py:9 in step"
    assert watch.check(T0 + 40 * S, {0, 1, 2}, never) == []  # said once


def test_a_pause_every_rank_shares_is_no_stall_at_any_length() -> None:
    watch = StallWatch(threshold_s=30)
    watch.add([head(r, 1, 0.0) for r in (0, 1, 2)])
    assert watch.check(T0 + 3600 * S, {0, 1, 2}, never) == []


def test_an_ended_rank_is_no_laggard_and_a_lone_member_no_stall() -> None:
    watch = StallWatch(threshold_s=1)
    watch.add([head(r, 1, 0.0) for r in (0, 1, 2)] + [head(0, 2, 0.0)])
    assert watch.check(T0 + 60 * S, {0}, never) == []  # ranks 1 and 2 ended
    [stall] = watch.check(T0 + 60 * S, {0, 1}, never)
    assert stall.laggards == (1,) and stall.waiting == (0,)


def test_a_mirrored_laggard_lags_only_as_long_as_its_rings_are_known_complete() -> None:
    """Collectives only torch's FR saw reach the ring at the rank's next read of it: until
    its rings are known complete past the threshold, the laggard may have issued it."""
    watch = StallWatch(threshold_s=10)
    watch.add([head(r, 1, 0.0, mirrored=True) for r in (0, 1)])
    watch.add([head(0, 2, 1.0, mirrored=True)])
    complete = {1: T0 + 5 * S}
    assert watch.check(T0 + 60 * S, {0, 1}, complete.__getitem__) == []
    complete[1] = T0 + 12 * S
    [stall] = watch.check(T0 + 60 * S, {0, 1}, complete.__getitem__)
    assert stall.laggards == (1,) and stall.waited_s == 11.0


def test_a_rank_that_waits_in_another_groups_stall_is_not_its_laggard() -> None:
    """Rank 2 is stuck in host code. Rank 1 waits for it in group "b" and so never issues
    group "a"'s #2, where rank 0 waits: rank 1 is a waiter, not the culprit."""
    watch = StallWatch(threshold_s=5)
    watch.add([head(r, 1, 0.0, group="a", members=(0, 1)) for r in (0, 1)])
    watch.add([head(r, 1, 0.0, group="b", members=(1, 2)) for r in (1, 2)])
    watch.add([head(1, 2, 1.0, group="b", members=(1, 2))])  # rank 2 never comes
    watch.add([head(0, 2, 2.0, group="a", members=(0, 1))])  # rank 1 is held in "b"
    [stall] = watch.check(T0 + 60 * S, {0, 1, 2}, never)
    assert (stall.group, stall.laggards, stall.waiting) == ("b", (2,), (1,))


def test_the_threshold_grows_with_the_observed_step() -> None:
    """A job whose step takes 20 s waits STEP_MULTIPLE steps, not 30 s."""
    watch = StallWatch(threshold_s=30)
    for step in range(5):
        watch.add([head(r, step, 20.0 * step) for r in (0, 1)])
    assert watch.step_s == 20.0
    assert watch.effective_threshold_s == STEP_MULTIPLE * 20.0
    watch.add([head(0, 5, 100.0)])
    assert watch.check(T0 + 150 * S, {0, 1}, never) == []  # 50 s: a slow step, not a stall
    [stall] = watch.check(T0 + 201 * S, {0, 1}, never)
    assert stall.threshold_s == 100.0 and stall.laggards == (1,)


def test_the_step_is_found_whatever_the_ids() -> None:
    """The collectives are told apart by their (group, fingerprint, site) ids packed into
    one integer while they fit, else row by row: both give the same keys."""
    import numpy as np

    from fr_otel.live.columns import Columns
    from fr_otel.live.stall import _by_key

    def rows(offset: int) -> Columns:
        key = np.array([0, 0, 1, 0, 1], np.int64) + offset
        return Columns(
            rank=np.zeros(5, np.int64),
            key=key,
            seq=np.arange(5, dtype=np.int64),
            fp=np.array([3, 3, 3, 4, 3], np.int64) + offset,
            site=np.array([-1, -1, 2, -1, 2], np.int64),
            created=np.arange(5, dtype=np.int64) * 10,
            mirrored=np.zeros(5, bool),
        )

    def found(offset: int) -> dict[tuple[int, int, int], list[int]]:
        return {
            (k - offset, f - offset, s): created.tolist()
            for (k, f, s), created in _by_key(rows(offset))
        }

    assert (
        found(0)
        == found(1 << 40)
        == {
            (0, 3, -1): [0, 10],
            (1, 3, 2): [20, 40],
            (0, 4, -1): [30],
        }
    )
