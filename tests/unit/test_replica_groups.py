"""Replicas whose groups share a name (torchft's replica groups: created apart and
numbered alike) stay separate groups: in the memberships the
import resolves, in the incident's manifest, and so in the analysis, which once merged
them into one group with one replica's members and then found nothing wrong."""

from __future__ import annotations

from pathlib import Path

from fr_otel.analysis import analyze
from fr_otel.archive import import_dumps
from fr_otel.archive.manifest import GroupMembers, read_manifest, refresh_manifest
from fr_otel.dumps.membership import resolve_memberships
from fr_otel.dumps.parse import GroupSeen
from tests.fr_dumps import fr_dump, fr_entry, write_pickle


def _seen(ranks: list[int] | None, entries: int = 1) -> GroupSeen:
    return GroupSeen(name="1", desc="replica", ranks=ranks, entries=entries)


def _lists(groups_by_rank: dict[int, dict[str, GroupSeen]]) -> list[tuple[int, ...]]:
    return [m.ranks for m in resolve_memberships(groups_by_rank) if m.name == "1"]


def test_disjoint_lists_each_recorded_by_its_own_members_are_replicas() -> None:
    views = {r: {"1": _seen([0, 1] if r < 2 else [2, 3])} for r in range(4)}
    assert sorted(_lists(views)) == [(0, 1), (2, 3)]


def test_lists_that_disagree_otherwise_are_a_mistake_and_the_majority_wins() -> None:
    # overlapping lists: one group, recorded wrongly by one rank
    views = {0: {"1": _seen([0, 1])}, 1: {"1": _seen([0, 1])}, 2: {"1": _seen([0, 1, 2])}}
    assert _lists(views) == [(0, 1)]
    # disjoint, but rank 0 records a list it is not in: not a replica of its own
    views = {0: {"1": _seen([2, 3])}, 1: {"1": _seen([0, 1])}, 2: {"1": _seen([0, 1])}}
    assert _lists(views) == [(0, 1)]


def _replica(rank: int, folder: Path, *, steps: int = 6) -> None:
    """Rank ``rank`` of two replicas ("1": ranks 0-1 and 2-3) of a 4-rank job, its
    replica's collectives still running after ``steps`` of them."""
    world = {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}
    pair = "[0, 1]" if rank < 2 else "[2, 3]"
    config = {"0": world, "1": {"name": "1", "desc": "replica", "ranks": pair}}
    entries = [fr_entry(record_id=0, seq=1)] + [
        fr_entry(record_id=i + 1, seq=i + 1, pg=("1", "replica")) for i in range(steps)
    ]
    entries[-1] = fr_entry(record_id=steps, seq=steps, pg=("1", "replica"), state="scheduled")
    write_pickle(folder / f"nccl_trace_rank_{rank}", fr_dump(entries, pg_config=config))


def test_a_rank_that_fell_behind_in_its_replica_is_found(tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    for rank in range(4):
        # rank 3 stopped before its replica's 6th all-reduce, which rank 2 waits in
        _replica(rank, dumps, steps=5 if rank == 3 else 6)
    for source in (dumps, tmp_path / "archive"):
        if source.name == "archive":
            import_dumps([dumps], archive=source, workers=1)
        analysis = analyze(source)
        root = analysis.findings[analysis.root_cause or 0]
        assert root.kind == "missing_rank", source
        assert (root.group.name, root.group.ranks) == ("1", (2, 3)), source
        assert root.culprit_ranks == [3], source
        # the other replica, ranks 0-1, which did all six, is named nowhere
        assert not any({0, 1} & set(f.culprit_ranks) for f in analysis.findings), source


def test_ranks_flushed_apart_keep_each_replica_in_the_manifest(tmp_path: Path) -> None:
    for rank in range(4):
        _replica(rank, tmp_path / "dumps")
    archive = tmp_path / "archive"
    # one import per replica, as ranks flushing on their own write them
    for ranks in ((0, 1), (2, 3)):
        import_dumps(
            [tmp_path / "dumps" / f"nccl_trace_rank_{r}" for r in ranks],
            archive=archive,
            job="j",
            incident="i",
            workers=1,
        )
    manifest = read_manifest(archive, "j", "i")
    assert manifest is not None
    assert [(g.name, g.ranks) for g in manifest.groups] == [
        ("0", (0, 1, 2, 3)),
        ("1", (0, 1)),
        ("1", (2, 3)),
    ]
    # a later, overlapping list of a name replaces the one it overlaps, not its replica
    later = GroupMembers(name="1", desc="replica", ranks=(2, 3, 4), inferred=False)
    manifest = refresh_manifest(archive, "j", "i", [later])
    assert [g.ranks for g in manifest.groups if g.name == "1"] == [(0, 1), (2, 3, 4)]
    # and an inferred group (gloo's, which only grows) replaces every one of its name
    inferred = GroupMembers(name="1", desc="replica", ranks=(0, 1, 2, 3), inferred=True)
    manifest = refresh_manifest(archive, "j", "i", [inferred])
    assert [g.ranks for g in manifest.groups if g.name == "1"] == [(0, 1, 2, 3)]
