"""The analyzer's verdicts on simulated NCCL fleets, one per fault kind, against ground truth.

The simulator runs NCCL's execution model, so each fault's symptoms (shifted sequence
numbers, ranks blocked in other groups, mixed started/scheduled states, ring buffers
that wrapped at different points) emerge as in real jobs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fr_otel.analysis import Analysis, analyze
from fr_otel.cli import main
from fr_otel.sim import FAULT_KINDS, FleetSpec, simulate, write_fleet

EXPECTED_KIND = {
    "gpu_hang": "stuck_in_flight",
    "network": "stuck_in_flight",
    "all_to_all_splits": "size_mismatch",
}
FAULTS = [kind for kind in FAULT_KINDS if kind != "none"]


def _fleet_dir(tmp_path: Path, spec: FleetSpec, **write: object) -> tuple[Path, object]:
    fleet = simulate(spec)
    out = tmp_path / f"{spec.fault}-{spec.world}-{spec.seed}"
    write_fleet(fleet, out, **write)  # type: ignore[arg-type]
    return out, fleet.truth


def _root(analysis: Analysis):  # type: ignore[no-untyped-def]
    assert analysis.root_cause is not None, "no root cause"
    return analysis.findings[analysis.root_cause]


def test_healthy_fleet_with_pipeline_send_recv_has_no_findings(tmp_path: Path) -> None:
    # batched send/recv between pipeline stages: fr_trace reports these as mismatches
    out, _ = _fleet_dir(tmp_path, FleetSpec(world=16, entries=300, pp=2))
    analysis = analyze(out)
    assert analysis.findings == [] and analysis.root_cause is None
    assert analysis.ranks == list(range(16)) and analysis.missing_dumps == []


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize(("world", "seed"), [(16, 0), (32, 3)])
def test_root_cause_matches_ground_truth(tmp_path: Path, fault: str, world: int, seed: int) -> None:
    out, truth = _fleet_dir(tmp_path, FleetSpec(world=world, entries=300, fault=fault, seed=seed))
    root = _root(analyze(out))
    assert root.kind == EXPECTED_KIND.get(fault, fault), root.summary
    assert root.culprit_ranks == sorted(truth.culprit_ranks), root.summary  # type: ignore[attr-defined]


@pytest.mark.parametrize("fault", ["skipped_collective", "size_mismatch", "gpu_hang"])
def test_a_missing_dump_is_unknown_never_a_culprit(tmp_path: Path, fault: str) -> None:
    fleet = simulate(FleetSpec(world=16, entries=300, fault=fault))
    culprit = fleet.truth.culprit_ranks[0]
    # a member of the culprit's group other than the culprit itself wrote no dump
    group = [r for r in (fleet.truth.pg_ranks or range(16)) if r != culprit]
    absent = group[0]
    write_fleet(fleet, tmp_path / "d", omit_ranks=[absent])
    analysis = analyze(tmp_path / "d")
    assert analysis.missing_dumps == [absent]
    assert all(absent not in f.culprit_ranks for f in analysis.findings)
    assert _root(analysis).culprit_ranks == [culprit]


def test_verdict_does_not_depend_on_file_order(tmp_path: Path) -> None:
    # fr_trace takes the first file it reads as the reference; rename the culprit's
    # file so that it sorts (and is read) first
    out, truth = _fleet_dir(tmp_path, FleetSpec(world=16, entries=300, fault="op_type_mismatch"))
    culprit = truth.culprit_ranks[0]  # type: ignore[attr-defined]
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    for path in out.iterdir():
        rank = int(path.name.rsplit("_", 1)[1])
        prefix = "a_rank_" if rank == culprit else "b_rank_"
        shutil.copy(path, renamed / f"{prefix}{rank}")
    first, second = analyze(out), analyze(renamed)
    assert [(f.kind, f.culprit_ranks) for f in first.findings] == [
        (f.kind, f.culprit_ranks) for f in second.findings
    ]
    assert _root(second).culprit_ranks == [culprit]


def test_json_dumps_without_stacks_give_the_same_verdict(tmp_path: Path) -> None:
    spec = FleetSpec(world=16, entries=300, fault="skipped_collective")
    out, truth = _fleet_dir(tmp_path, spec, fmt="json")
    root = _root(analyze(out))
    assert (root.kind, root.culprit_ranks) == ("skipped_collective", list(truth.culprit_ranks))  # type: ignore[attr-defined]
    assert root.frames["culprit"][str(root.culprit_ranks[0])] == []


def test_without_timing_a_stuck_gpu_is_not_blamed_on_anyone(tmp_path: Path) -> None:
    # no `started` state exists without TORCH_NCCL_ENABLE_TIMING: say so, blame no one
    out, _ = _fleet_dir(tmp_path, FleetSpec(world=16, entries=300, fault="gpu_hang", timing=False))
    root = _root(analyze(out))
    assert root.kind == "stuck_in_flight" and root.culprit_ranks == []
    assert root.evidence["timing_known"] is False


def test_cross_group_deadlock_is_one_finding(tmp_path: Path) -> None:
    out, _truth = _fleet_dir(tmp_path, FleetSpec(world=16, entries=300, fault="cross_pg_deadlock"))
    analysis = analyze(out)
    deadlocks = [f for f in analysis.findings if f.kind == "cross_pg_deadlock"]
    assert len(deadlocks) == 1 and analysis.findings[0] is deadlocks[0]
    assert len(deadlocks[0].evidence["blocked"]) == 2


def test_consequences_point_at_the_root(tmp_path: Path) -> None:
    out, _ = _fleet_dir(tmp_path, FleetSpec(world=16, entries=300, fault="skipped_collective"))
    analysis = analyze(out)
    assert analysis.root_cause == 0
    assert len(analysis.findings) > 1
    assert all(f.consequence_of == 0 for f in analysis.findings[1:])


def test_json_contract_and_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, truth = _fleet_dir(tmp_path, FleetSpec(world=16, entries=300, fault="size_mismatch"))
    assert main(["analyze", str(out), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert {"world_size", "ranks", "missing_dumps", "findings", "root_cause"} <= set(report)
    assert report["world_size"] == 16 and report["ranks"] == list(range(16))
    finding = report["findings"][report["root_cause"]]
    assert {
        "kind",
        "process_group",
        "collective_seq_id",
        "op",
        "culprit_ranks",
        "summary",
        "evidence",
        "frames",
    } <= set(finding)
    assert set(finding["process_group"]) == {"name", "desc", "ranks"}
    assert finding["op"] == truth.op and ":" not in finding["op"]  # type: ignore[attr-defined]
    assert finding["culprit_ranks"] == list(truth.culprit_ranks)  # type: ignore[attr-defined]

    healthy, _ = _fleet_dir(tmp_path, FleetSpec(world=8, entries=200))
    assert main(["analyze", str(healthy), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["findings"] == []
    assert main(["analyze", str(tmp_path / "nothing-here")]) == 2
