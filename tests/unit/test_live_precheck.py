"""The live check's pre-check on real ring files (written by the recorder's own
``RingWriter``): each look reads only what ranks wrote since the last, and members of a
group that issued different collectives at one (group, seq) become a candidate once every
running member has reached it, never for the differences the analyzer knows to be legal."""

from __future__ import annotations

from pathlib import Path

import pytest

from fr_otel import config
from fr_otel.live.compare import Board, Candidate
from fr_otel.live.heads import Head, RankRings, fingerprint
from fr_otel.recorder.ring import Signature, torch_ring_base
from tests.live_rings import WORLD, Rank, signature


@pytest.fixture
def ranks(tmp_path: Path) -> list[Rank]:
    made = [Rank(tmp_path, rank) for rank in WORLD]
    yield made
    for rank in made:
        rank.writer.close()


def _look(
    board: Board, followed: list[RankRings], running: tuple[int, ...] = WORLD
) -> list[Candidate]:
    return board.add([head for rings in followed for head in rings.new_heads()], running)


def test_each_look_reads_what_was_written_since_the_last(tmp_path: Path) -> None:
    rank = Rank(tmp_path, 0, capacity=8)
    rings = RankRings(rank.base)
    for _ in range(3):
        rank.issue(signature("all_reduce", 4))
    rank.issue(signature("send", 4), peer=1)  # point-to-point ops are not compared
    assert [h.seq for h in rings.new_heads()] == [1, 2, 3]
    assert rings.new_heads() == []
    # a group interned after the first look is read from the meta file
    rank.issue(signature("all_gather", 8), group="7", ranks=(0, 1))
    [head] = rings.new_heads()
    assert (head.group, head.members, head.seq, head.op) == ("7", (0, 1), 1, "all_gather")
    assert head.site == "train.py:10 in step"
    # more than the ring holds since the last look: only what it still holds
    for _ in range(20):
        rank.issue(signature("all_reduce", 4))
    assert [h.seq for h in rings.new_heads()] == list(range(16, 24))
    rank.writer.close()


def test_the_torch_ring_is_read_with_the_rank_as_one(tmp_path: Path) -> None:
    """What only torch's FR saw (DDP's buckets) lands in the rank's torch ring, written by
    its watch thread; it has groups and signatures of its own and no user call site."""
    rank = Rank(tmp_path, 0)
    mirror = rank.writer.sibling(torch_ring_base(rank.base))
    rings = RankRings(rank.base)
    rank.issue(signature("broadcast", 4), seq=1)
    rank.issue(signature("all_reduce", 96), seq=2, writer=mirror)
    heads = sorted(rings.new_heads(), key=lambda h: h.seq)
    assert [(h.seq, h.op, h.site is None) for h in heads] == [
        (1, "broadcast", False),
        (2, "all_reduce", True),
    ]
    mirror.close()
    rank.writer.close()


def test_a_size_mismatch_is_a_candidate_once_every_running_member_reached_it(
    ranks: list[Rank],
) -> None:
    board, followed = Board(), [RankRings(r.base) for r in ranks]
    ranks[0].issue(signature("all_reduce", 1000))
    ranks[1].issue(signature("all_reduce", 1001))
    # rank 2 has not issued its collective yet: a snapshot's analysis would not see it
    assert _look(board, followed) == []
    ranks[2].issue(signature("all_reduce", 1000))
    [candidate] = _look(board, followed)
    assert (candidate.group, candidate.members, candidate.seq) == ("0", WORLD, 1)
    assert candidate.ranks == [0, 1, 2]
    assert _look(board, followed) == []  # said once


def test_a_member_that_stopped_is_not_waited_for(ranks: list[Rank]) -> None:
    board, followed = Board(), [RankRings(r.base) for r in ranks]
    ranks[0].issue(signature("all_reduce", 1000))
    ranks[1].issue(signature("all_reduce", 1001))
    assert _look(board, followed) == []
    [candidate] = _look(board, followed, running=(0, 1))
    assert candidate.ranks == [0, 1]


def test_a_skip_is_a_candidate_by_its_call_site_alone(ranks: list[Rank]) -> None:
    """Two all_reduces of one size: the rank that left out the first issues the second
    where its peers issue the first; only where it was called from differs."""
    board, followed = Board(), [RankRings(r.base) for r in ranks]
    for rank in ranks:
        rank.issue(signature("all_reduce", 8), line=10 if rank.writer.rank != 1 else 20)
    [candidate] = _look(board, followed)
    assert {h.site for h in candidate.heads} == {"train.py:10 in step", "train.py:20 in step"}


@pytest.mark.parametrize(
    ("root", "other", "candidate"),
    [
        # scatter: only the source passes the list; gather: only the destination
        (signature("scatter", 12), signature("scatter", 0), False),
        (signature("all_to_all_single", 7), signature("all_to_all_single", 5), False),
        (signature("scatter", 12), signature("scatter", 0, dtype="BFloat16"), True),
        (signature("all_reduce", 8), signature("all_reduce", 8, dtype="BFloat16"), True),
        (signature("all_reduce", 8), signature("all_gather_into_tensor", 8), True),
        # gloo runs reduce_scatter_tensor as all_reduce: each rank's recorder learns that
        # name at its own next read of torch's FR, the function called stays the same
        (
            signature("all_reduce", 8, api="reduce_scatter_tensor"),
            signature("reduce_scatter_tensor", 8, api="reduce_scatter_tensor"),
            False,
        ),
    ],
    ids=["scatter-list", "all_to_all-splits", "scatter-dtype", "dtype", "op", "torch-op-name"],
)
def test_only_differences_the_analyzer_weighs_are_candidates(
    ranks: list[Rank], root: Signature, other: Signature, candidate: bool
) -> None:
    board, followed = Board(), [RankRings(r.base) for r in ranks]
    ranks[0].issue(root)
    ranks[1].issue(other)
    ranks[2].issue(other)
    assert bool(_look(board, followed)) is candidate
    assert (fingerprint(root) == fingerprint(other)) is not candidate


def test_groups_of_one_name_and_other_members_are_never_compared(ranks: list[Rank]) -> None:
    """A 2-D mesh's tp groups can share a name on their separate members."""
    board, followed = Board(), [RankRings(r.base) for r in ranks]
    ranks[0].issue(signature("all_reduce", 8), group="3", ranks=(0,))
    ranks[1].issue(signature("all_reduce", 16), group="3", ranks=(1, 2))
    ranks[2].issue(signature("all_reduce", 16), group="3", ranks=(1, 2))
    assert _look(board, followed) == []


def test_a_batch_at_one_seq_is_left_to_the_incident(ranks: list[Rank]) -> None:
    board, followed = Board(), [RankRings(r.base) for r in ranks]
    for rank in ranks:
        rank.issue(signature("all_reduce", 8), seq=1)
        rank.issue(signature("all_reduce", 4 if rank.writer.rank else 2), seq=1)
    assert _look(board, followed) == []


def _head(rank: int, size: int, created_ns: int) -> Head:
    return Head(
        rank=rank,
        group="0",
        seq=1,
        fingerprint=fingerprint(signature("all_reduce", size)),
        op="all_reduce",
        site=None,
        created_ns=created_ns,
        members=WORLD,
        group_key="0|0,1,2",
    )


def test_the_divergence_is_when_the_first_differing_collective_was_issued() -> None:
    heads = (_head(0, 8, 100), _head(1, 9, 300), _head(2, 8, 200))
    candidate = Candidate(group="0", members=WORLD, seq=1, heads=heads)
    assert candidate.divergence_ns == 300


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, config.LiveSettings()),
        ({"FR_OTEL_LIVE": "0"}, config.LiveSettings(enabled=False)),
        ({"FR_OTEL_LIVE_POLICY": "ABORT"}, config.LiveSettings(policy="abort")),
        ({"FR_OTEL_LIVE_POLICY": "panic"}, config.LiveSettings()),
        ({"FR_OTEL_LIVE_INTERVAL": "2"}, config.LiveSettings(interval_s=2.0)),
        ({"FR_OTEL_LIVE_INTERVAL": "-1", "FR_OTEL_LIVE": "maybe"}, config.LiveSettings()),
    ],
)
def test_live_settings_from_the_environment(
    environ: dict[str, str], expected: config.LiveSettings
) -> None:
    assert config.live_settings(environ) == expected


def _heads(
    rank: int,
    seqs: range,
    *,
    size: int = 8,
    site: str | None = "train.py:10 in step",
    mirrored: bool = False,
) -> list[Head]:
    return [
        Head(
            rank=rank,
            group="0",
            seq=seq,
            fingerprint=fingerprint(signature("all_reduce", size)),
            op="all_reduce",
            site=site,
            created_ns=seq,
            members=(0, 1),
            group_key="0|0,1",
            mirrored=mirrored,
        )
        for seq in seqs
    ]


def test_agreeing_members_leave_nothing_on_the_board() -> None:
    """Thousands of collectives every member issued alike: no candidate, and nothing kept
    once every member has reached them (the board's memory is what members lag by)."""
    board = Board()
    for look in range(5):
        seqs = range(1 + 1000 * look, 1 + 1000 * (look + 1))
        assert board.add(_heads(0, seqs) + _heads(1, seqs[:-10]), (0, 1)) == []
    [group] = board._groups.values()
    assert sum(len(rows) for rows in group.pending) == 10  # rank 0's lead alone


def test_collectives_that_come_late_are_compared_with_those_of_their_look() -> None:
    """A mixed group: the hooked collectives moved both ranks past #3, whose records
    came later through the torch ring (a read of torch's FR), in one look."""
    board = Board()
    assert board.add(_heads(0, range(4, 9)) + _heads(1, range(4, 9)), (0, 1)) == []
    [candidate] = board.add(
        _heads(0, range(3, 4), size=4, site=None, mirrored=True)
        + _heads(1, range(3, 4), size=6, site=None, mirrored=True),
        (0, 1),
    )
    assert (candidate.seq, candidate.ranks) == (3, [0, 1])
    assert all(head.mirrored and head.site is None for head in candidate.heads)


def test_a_site_differs_from_every_known_site_whatever_the_order() -> None:
    """Three members: one without a known site (its record came through the torch ring)
    and two whose sites differ."""
    board = Board()
    heads = (
        _heads(0, range(1, 2), site=None, mirrored=True)
        + _heads(1, range(1, 2), site="train.py:10 in step")
        + _heads(2, range(1, 2), site="train.py:20 in step")
    )
    for head in heads:
        head.members = WORLD
        head.group_key = "0|0,1,2"
    [candidate] = board.add(heads, WORLD)
    assert candidate.ranks == [0, 1, 2]
