"""Culprits are culprits: ranks that only wait behind a cause are ``waiting_ranks``, and
the findings a cause explains sit under it, once per fault.

On simulated 64-rank fleets (``fr-otel simulate``), the same as people run, and on the
real gloo job whose two pairs of ranks wait on each other across groups.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest

from fr_otel.analysis import analyze
from fr_otel.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"


def _simulate(tmp_path: Path, fault: str, *extra: str) -> tuple[Path, dict[str, object]]:
    out = tmp_path / fault
    args = ["simulate", str(out), "--world", "64", "--entries", "400", "--fault", fault]
    assert main([*args, *extra, "--truth"]) == 0
    truth: dict[str, object] = json.loads((out / "truth.json").read_text())["truth"]
    return out, truth


def test_a_64_rank_gpu_hang_blames_only_the_hung_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, truth = _simulate(tmp_path, "gpu_hang")
    culprit = truth["culprit_ranks"]
    capsys.readouterr()
    assert main(["analyze", str(out), "--format", "json", "-o", str(tmp_path / "v.json")]) == 1
    verdict = json.loads((tmp_path / "v.json").read_text())
    root = verdict["findings"][verdict["root_cause"]]
    assert (root["kind"], root["culprit_ranks"]) == ("stuck_in_flight", culprit)
    # no innocent rank in any finding's culprits: the dp peers and the default group
    # members that wait behind the hung GPU are waiting ranks, not culprits
    for finding in verdict["findings"]:
        assert set(finding["culprit_ranks"]) <= set(culprit), finding["summary"]
    waiting = {r for f in verdict["findings"] for r in f["waiting_ranks"]}
    assert waiting and not waiting & set(culprit)
    consequences = [i for i, f in enumerate(verdict["findings"]) if i != verdict["root_cause"]]
    assert consequences and root["consequences"] == consequences
    assert all(
        verdict["findings"][i]["consequence_of"] == verdict["root_cause"] for i in consequences
    )
    # the SQL view says the same
    archive = tmp_path / "archive"
    assert main(["import", str(out), "--archive", str(archive)]) == 0
    capsys.readouterr()
    query = "SELECT kind, culprit_ranks, waiting_ranks, consequence_of FROM findings ORDER BY idx"
    assert main(["sql", str(archive), query, "--format", "json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows[0]["culprit_ranks"] == culprit
    assert all(set(row["culprit_ranks"]) <= set(culprit) for row in rows)
    assert {r for row in rows for r in row["waiting_ranks"]} == waiting


@pytest.mark.parametrize("fault", ["size_mismatch", "dtype_mismatch", "all_to_all_splits"])
def test_one_fault_is_one_root_and_one_finding_per_consequence(tmp_path: Path, fault: str) -> None:
    # tp 8 x pp 2 x dp 4: the culprit's 7 tp peers wait behind it, each absent from its own
    # dp group and each failing its own pipeline send: 8 replicas of the same consequence
    out, truth = _simulate(tmp_path, fault, "--tp", "8", "--pp", "2")
    analysis = analyze(out)
    root, *rest = analysis.findings
    assert analysis.root_cause == 0 and root.culprit_ranks == truth["culprit_ranks"]
    assert rest and all(f.consequence_of == 0 for f in rest)
    assert root.consequences == list(range(1, len(analysis.findings)))
    kinds = [f.kind for f in rest]
    assert len(kinds) == len(set(kinds)), kinds  # replicas merged: one finding per kind
    for finding in rest:
        assert set(finding.culprit_ranks) <= set(root.culprit_ranks), finding.summary
        if "replicas" in finding.evidence:
            assert len(finding.evidence["replicas"]) > 1
            assert "not at fault" in finding.summary


def _cut_rank_3(folder: Path, start: int | None, stop: int | None) -> None:
    """Keep rank 3's entries from ``start`` to ``stop``, counted from its last pair
    all_reduce (the collective it skipped next)."""
    path = folder / "comm_lib_trace_rank_3"
    dump = pickle.loads(path.read_bytes())
    last_pair = max(
        i for i, e in enumerate(dump["entries"]) if e["process_group"][1] != "default_pg"
    )
    dump["entries"] = dump["entries"][
        None if start is None else last_pair + start : None if stop is None else last_pair + stop
    ]
    path.write_bytes(pickle.dumps(dump))


def _subgroups(tmp_path: Path, *, drop_replica_pair: bool) -> Path:
    folder = tmp_path / "subgroups"
    shutil.copytree(DATA / "workload_subgroups_skip", folder)
    # rank 3's buffer wrapped: it begins one op before its last pair all_reduce, so its own
    # history (what it issued between its pair all_reduces a step earlier) no longer shows
    # the skip; only the order of the two waits can name it
    _cut_rank_3(folder, -1, None)
    if drop_replica_pair:
        # ranks 0 and 2 keep only their default-group entries: nobody in the same role
        # shows any more which of the two waits came first
        for rank in (0, 2):
            path = folder / f"comm_lib_trace_rank_{rank}"
            dump = pickle.loads(path.read_bytes())
            dump["entries"] = [e for e in dump["entries"] if e["process_group"][1] == "default_pg"]
            path.write_bytes(pickle.dumps(dump))
    return folder


def test_a_cross_group_wait_cycle_is_resolved_by_the_replica_pair(tmp_path: Path) -> None:
    # rank 3 skipped its pair all_reduce: rank 1 waits for it in pair [1, 3], ranks 0, 2
    # and 3 wait for rank 1 in the default group. Ranks 0 and 2, in the other pair, issued
    # their pair all_reduce before the default one, as every rank did at every step.
    analysis = analyze(_subgroups(tmp_path, drop_replica_pair=False))
    root, consequence = analysis.findings
    assert (root.kind, root.culprit_ranks, root.group.ranks) == ("missing_rank", [3], (1, 3))
    [before] = root.evidence["came_before"]
    assert before["basis"] == "replicas" and before["ranks"] == [1]
    assert (consequence.kind, consequence.culprit_ranks) == ("missing_rank", [])
    assert consequence.waiting_ranks == [1] and consequence.consequence_of == 0


def test_a_skip_across_groups_is_told_by_the_skipping_rank_own_history() -> None:
    # the same incident with rank 3's whole buffer: after its last pair all_reduce it
    # issued the loss and gradient all_reduces it had issued between its pair all_reduces
    # a step earlier, then the loss all_reduce again instead of the pair one
    analysis = analyze(DATA / "workload_subgroups_skip")
    root, consequence = analysis.findings
    assert (root.kind, root.culprit_ranks, root.group.ranks) == ("skipped_collective", [3], (1, 3))
    assert root.evidence["went_to"]["op"] == "all_reduce"
    assert root.evidence["went_to"]["input_sizes"] == [[1]]  # the loss all_reduce
    assert (consequence.kind, consequence.culprit_ranks) == ("missing_rank", [])
    assert consequence.waiting_ranks == [1] and consequence.consequence_of == 0


def test_a_rank_stopped_after_the_same_stretch_did_not_skip(tmp_path: Path) -> None:
    # rank 3 cut right after the stretch that precedes its pair all_reduce: stuck before the
    # collective, not past it; no skip is claimed
    folder = tmp_path / "stopped"
    shutil.copytree(DATA / "workload_subgroups_skip", folder)
    _cut_rank_3(folder, None, 3)
    analysis = analyze(folder)
    assert all(f.kind != "skipped_collective" for f in analysis.findings), [
        f.summary for f in analysis.findings
    ]


def test_a_wait_cycle_no_evidence_orders_is_ambiguous(tmp_path: Path) -> None:
    analysis = analyze(_subgroups(tmp_path, drop_replica_pair=True))
    root = analysis.findings[analysis.root_cause or 0]
    assert root.kind == "cross_pg_deadlock" and root.evidence["ambiguous"] is True
    assert root.culprit_ranks == [] and "cannot tell which came first" in root.summary
    assert sorted(r for c in root.evidence["candidates"] for r in c["ranks"]) == [1, 3]
    assert "too close" in root.evidence["reason"]
    assert all(f.culprit_ranks == [] for f in analysis.findings)
    assert all(f.consequence_of == 0 for f in analysis.findings[1:])


def test_the_verdict_does_not_depend_on_file_names_or_order(tmp_path: Path) -> None:
    folder = _subgroups(tmp_path, drop_replica_pair=False)
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    for path in folder.glob("comm_lib_trace_rank_*"):
        rank = int(path.name.rsplit("_", 1)[1])
        shutil.copy(path, renamed / f"{'a' if rank == 3 else 'b'}_rank_{rank}")

    def shape(path: Path) -> list[tuple[object, ...]]:
        analysis = analyze(path)
        return [
            (f.kind, f.group.ranks, f.collective_seq_id, f.culprit_ranks, f.waiting_ranks)
            for f in analysis.findings
        ]

    assert shape(folder) == shape(renamed)
