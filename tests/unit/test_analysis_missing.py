"""A missing dump never makes an incident healthy, and never gets a present rank blamed.

Every committed real gloo job (``tests/data/gloo_*``, ``tests/data/workload_*``) is
analysed once per rank with that rank's dump deleted, as a partly archived incident is.
The rank that left no dump may be named as the suspect, on the evidence of its silence;
a rank that is there is blamed only if the job's ground truth blames it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.analysis import Analysis, analyze
from fr_otel.archive import import_dumps
from fr_otel.cli import main
from tests.fixtures import restore_dump_times

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURES = sorted(
    p.name
    for p in DATA.iterdir()
    if (p / "scenario.json").is_file()
    and json.loads((p / "scenario.json").read_text())["world"] > 1
)


def _without(tmp_path: Path, name: str, rank: int) -> Path:
    """A copy of fixture ``name`` without rank ``rank``'s dump files (real files)."""
    meta = json.loads((DATA / name / "scenario.json").read_text())
    folder = tmp_path / f"{name}-without-{rank}"
    shutil.copytree(DATA / name, folder)
    for relative in meta["files"][str(rank)].values():
        (folder / relative).unlink()
    restore_dump_times(folder)
    return folder


def _suspects(analysis: Analysis) -> set[int]:
    assert analysis.root_cause is not None
    root = analysis.findings[analysis.root_cause]
    return (
        set(root.culprit_ranks)
        | set(root.evidence.get("candidate_ranks", ()))
        | {r for c in root.evidence.get("candidates", ()) for r in c["ranks"]}
    )


@pytest.mark.parametrize("name", FIXTURES)
def test_a_missing_dump_is_never_healthy_and_never_blames_a_present_rank(
    name: str, tmp_path: Path
) -> None:
    meta = json.loads((DATA / name / "scenario.json").read_text())
    truth = set(meta["scenario"]["culprit_ranks"])
    for rank in range(meta["world"]):
        analysis = analyze(_without(tmp_path, name, rank))
        context = (rank, [(f.kind, f.culprit_ranks, f.summary) for f in analysis.findings])
        assert rank not in analysis.ranks, context
        if rank == meta["world"] - 1 and not analysis.missing_dumps:
            # nothing the other ranks' dumps hold says a higher rank existed (no group
            # lists members, no collective's shape implies more): it cannot be missed
            continue
        assert analysis.missing_dumps == [rank], context
        # a broken incident is never healthy
        assert analysis.findings and analysis.root_cause is not None, context
        # only the ground truth's culprits, or the rank that left no dump, are blamed
        blamed = {r for f in analysis.findings for r in f.culprit_ranks}
        assert blamed <= truth | {rank}, context
        if rank in truth:
            # the culprit left no dump: it is the suspect (by its silence), alone or among
            # the candidates the evidence cannot tell apart
            assert rank in _suspects(analysis), context
        for finding in analysis.findings:
            assert set(finding.waiting_ranks).isdisjoint(finding.culprit_ranks), context


def test_the_skip_is_the_root_even_without_an_innocent_ranks_dump(tmp_path: Path) -> None:
    # without rank 3's dump, gloo's inferred membership drops rank 3 from back_group, and
    # every all_gather there "broke its shape rule" on ranks 1 and 2 (group size 2): the
    # group's own all_gathers say it has 3 members, so the missing one is rank 3
    analysis = analyze(_without(tmp_path, "gloo_skipped_collective", 3))
    assert analysis.missing_dumps == [3]
    (root,) = analysis.findings
    assert (root.kind, root.culprit_ranks) == ("skipped_collective", [1])
    assert (root.group.desc, root.collective_seq_id) == ("default_pg", 7)


def test_the_culprits_silence_makes_it_the_suspect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # rank 1 skipped default_pg #7; without its dump, ranks 0, 2 and 3 all wait in #7,
    # which only rank 1 could complete
    folder = _without(tmp_path, "gloo_skipped_collective", 1)
    analysis = analyze(folder)
    root = analysis.findings[analysis.root_cause or 0]
    assert (root.kind, root.culprit_ranks) == ("silent_rank", [1])
    assert root.evidence["by_silence"] is True and root.evidence["present_ranks"] == [0, 2, 3]
    assert (root.group.desc, root.collective_seq_id) == ("default_pg", 7)
    assert "the evidence is its silence" in root.summary
    assert main(["analyze", str(folder)]) == 1
    assert capsys.readouterr().out.startswith("ROOT CAUSE: every member with a dump")


def _archive_of(tmp_path: Path, name: str) -> Path:
    archive = tmp_path / "archive"
    assert import_dumps([DATA / name], archive=archive, job="j", incident="i").ok
    return archive


@pytest.mark.parametrize("how", ["absent", "zero rows"])
def test_a_rank_file_without_rows_is_a_silent_rank(tmp_path: Path, how: str) -> None:
    # a rank that died before its recorder read anything: its Parquet file is missing, or
    # holds no row; its peers wait in a collective only it could complete
    archive = _archive_of(tmp_path, "gloo_missing_rank")
    [path] = archive.glob("job=j/incident=i/rank-000000.parquet")
    if how == "absent":
        path.unlink()
    else:
        table = pq.read_table(path)
        pq.write_table(table.slice(0, 0), path)
    analysis = analyze(archive)
    assert analysis.missing_dumps == [0] and analysis.ranks == [1, 2]
    root = analysis.findings[analysis.root_cause or 0]
    assert (root.kind, root.culprit_ranks) == ("silent_rank", [0]), root.summary
    assert root.collective_seq_id == 7


def test_a_healthy_job_missing_a_dump_is_unknown_not_healthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # nobody there waits on anything, so nobody is a suspect; but nothing vouches for
    # rank 2 either: exit 1 and say what is unknown
    folder = _without(tmp_path, "workload_data_shuffle_healthy", 2)
    analysis = analyze(folder)
    assert analysis.missing_dumps == [2]  # scatter's source holds one chunk per member
    (finding,) = analysis.findings
    assert (finding.kind, finding.culprit_ranks) == ("silent_rank", [])
    assert "cannot be called healthy" in finding.summary
    assert main(["analyze", str(folder)]) == 1
    assert "No problems found" not in capsys.readouterr().out


# Jobs with a culprit whose dumps, less one, still show it: (fixture, the dump removed).
# The gloo jobs' peers dumped at once after their last blocking collective, which gloo had
# not yet marked complete (retire_lag_*), or hold an all_to_all whose splits one rank got
# wrong; removing the culprit's own dump leaves only its silence.
EVIDENCE_CASES = [
    (name, rank)
    for name, world in (
        ("retire_lag_missing_rank", 4),
        ("retire_lag_in_subgroup", 4),
        ("gloo_all_to_all_splits", 4),
        ("gloo_skipped_collective", 4),
        ("gloo_missing_rank", 3),
        ("workload_objects_hang", 3),
    )
    for rank in range(world)
]


@pytest.mark.parametrize(("name", "removed"), EVIDENCE_CASES)
def test_evidence_in_the_dumps_present_outranks_a_missing_dumps_silence(
    name: str, removed: int, tmp_path: Path
) -> None:
    truth = json.loads((DATA / name / "scenario.json").read_text())["scenario"]
    (culprit,) = truth["culprit_ranks"]
    analysis = analyze(_without(tmp_path, name, removed))
    root = analysis.findings[analysis.root_cause or 0]
    context = [(f.kind, f.culprit_ranks, f.summary) for f in analysis.findings]
    assert analysis.missing_dumps == [removed], context
    if removed == culprit:
        # only its silence is left: it is the suspect
        assert (root.kind, root.culprit_ranks) == ("silent_rank", [culprit]), context
        return
    kind = {"all_to_all_splits": "size_mismatch"}.get(truth["expected_kind"])
    assert root.kind == (kind or truth["expected_kind"]), context
    assert root.culprit_ranks == [culprit], context
    assert root.group.desc == truth["pg_desc"], context
    if "collective_seq_id" in truth:  # the workloads' truth has none
        assert root.collective_seq_id == truth["collective_seq_id"], context
    # the rank without a dump is unknown, never a culprit
    assert all(removed not in f.culprit_ranks for f in analysis.findings), context


@pytest.mark.parametrize("removed", [0, 2, 3])
def test_peers_that_went_past_a_blocking_collective_do_not_wait_in_it(
    removed: int, tmp_path: Path
) -> None:
    # ranks 0, 2 and 3 returned from default_pg #6 and issued #7, but dumped before gloo
    # retired #6; rank 1, stuck in host code, shows #6 retired: #6 is not where they wait
    meta = json.loads((DATA / "retire_lag_missing_rank" / "scenario.json").read_text())
    peers = [r for r in (0, 2, 3) if r != removed]
    assert all(meta["not_retired"][str(r)][0] == ["default_pg", 6] for r in peers)
    analysis = analyze(_without(tmp_path, "retire_lag_missing_rank", removed))
    assert [f.collective_seq_id for f in analysis.findings] == [7]
    (root,) = analysis.findings
    assert "rank 1 never issued all_reduce default_pg (pg 0) collective #7" in root.summary


def test_an_all_to_all_that_cannot_balance_without_a_members_dump(tmp_path: Path) -> None:
    # rank 1 sends 9 elements and receives 8; ranks 2 and 3 send and receive 8; rank 0's
    # share is unknown, taken to be the same as most members'
    analysis = analyze(_without(tmp_path, "gloo_all_to_all_splits", 0))
    (root,) = analysis.findings
    assert (root.kind, root.culprit_ranks) == ("size_mismatch", [1])
    evidence = root.evidence
    assert [r["rank"] for r in evidence["per_rank"]] == [1, 2, 3]
    assert evidence["assumed"] == {"ranks": [0], "input_numel": 8, "output_numel": 8}
    assert (evidence["total_input_numel"], evidence["total_output_numel"]) == (33, 32)
    assert "if rank 0, which left no dump, moved what most members did" in root.summary
    # with every dump there, nothing is assumed
    full = analyze(DATA / "gloo_all_to_all_splits").findings[0]
    assert "assumed" not in full.evidence and full.culprit_ranks == [1]


def _lagging(name: str) -> dict[int, bool]:
    """Per peer of a retire_lag_* job: whether its dump shows its last blocking collective
    (before default_pg #7) not retired."""
    meta = json.loads((DATA / name / "scenario.json").read_text())
    return {
        int(rank): len(seen) > 1
        for rank, seen in meta["not_retired"].items()
        if int(rank) not in meta["scenario"]["culprit_ranks"]
    }


def test_a_stopped_ranks_evidence_outranks_the_silence_its_peers_seem_to_wait_on(
    tmp_path: Path,
) -> None:
    # ranks 1 to 3 returned from back_group #3 and issued default_pg #7, which rank 0 never
    # issued; the two whose dumps show #3 not retired are all that is left of back_group
    # once the third's dump is gone, and seem to wait in #3 on it: its silence says
    # nothing about rank 0, which waits on nothing
    lagging = _lagging("retire_lag_in_subgroup")
    (removed,) = [rank for rank, lags in lagging.items() if not lags]
    analysis = analyze(_without(tmp_path, "retire_lag_in_subgroup", removed))
    root, silence = analysis.findings
    assert (root.kind, root.culprit_ranks, root.collective_seq_id) == ("missing_rank", [0], 7)
    assert (silence.kind, silence.group.desc, silence.collective_seq_id) == (
        "silent_rank",
        "back_group",
        3,
    )
    assert silence.culprit_ranks == [] and silence.consequence_of == 0
    assert analysis.missing_dumps == [removed]


def test_a_collective_every_member_issued_alike_and_went_past_holds_no_one(
    tmp_path: Path,
) -> None:
    # without rank 0's dump, nothing shows back_group #3 done, but ranks 1 to 3, its only
    # members, issued it alike and went on to default_pg #7: they wait there, on rank 0
    analysis = analyze(_without(tmp_path, "retire_lag_in_subgroup", 0))
    (root,) = analysis.findings
    assert (root.kind, root.culprit_ranks) == ("silent_rank", [0])
    assert (root.group.desc, root.collective_seq_id) == ("default_pg", 7)
    assert root.evidence["present_ranks"] == [1, 2, 3]
