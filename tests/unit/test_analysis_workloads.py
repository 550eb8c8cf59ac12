"""``fr-otel analyze`` on torch's own FR dumps of the training scripts in tests/workloads/.

Real gloo jobs (DTensor, functional collectives, a 2-D DeviceMesh, object collectives and
monitored_barrier, scatter/gather/uneven all_to_all), committed under
``tests/data/workload_<case>/`` with their ground truth in ``scenario.json``
(``python tests/data/generate_workloads.py`` regenerates them). The dumps have no stack
traces, as most real dumps, so call sites cannot help.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from fr_otel.analysis import analyze
from fr_otel.cli import main
from fr_otel.dumps.parse import split_profiling_name
from fr_otel.dumps.safe_pickle import load_plain

DATA_DIR = Path(__file__).resolve().parents[1] / "data"


def _load_fixture_helper() -> Any:
    # ``tests`` is not a package, so load tests/data/fixtures.py by its path.
    spec = importlib.util.spec_from_file_location("workload_fixtures", DATA_DIR / "fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_fixtures = _load_fixture_helper()
workload_dir = _fixtures.workload_dir
CASES = _fixtures.workload_cases()


def _scenario(name: str) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads((workload_dir(name) / "scenario.json").read_text())
    return meta


def _entries(name: str) -> dict[int, list[dict[str, Any]]]:
    """Each rank's FR entries, as torch wrote them."""
    folder = workload_dir(name)
    out = {}
    for rank, files in _scenario(name)["files"].items():
        with (folder / files["pickle"]).open("rb") as f:
            out[int(rank)] = load_plain(f).get("entries", [])
    return out


def _op(entry: dict[str, Any]) -> str:
    return split_profiling_name(entry["profiling_name"])[1]


HEALTHY = [c for c in CASES if _scenario(c)["scenario"]["expected_kind"] == "none"]
FAULTY = [c for c in CASES if c not in HEALTHY]


def test_every_case_is_committed() -> None:
    # a folder that fails to regenerate must not silently drop out of the parametrized tests
    assert {"dtensor_tp_healthy", "mesh2d_hang", "data_shuffle_skip"} <= set(CASES)
    for name in CASES:
        meta = _scenario(name)
        assert meta["stack_traces"] is False and meta["backend"] == "gloo"
        assert sorted(_entries(name)) == list(range(meta["world"]))


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_workload_has_no_findings(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    analysis = analyze(workload_dir(name))
    assert analysis.findings == [], [f.summary for f in analysis.findings]
    assert analysis.missing_dumps == []
    assert main(["analyze", str(workload_dir(name))]) == 0
    assert capsys.readouterr().out.startswith("No problems found")


@pytest.mark.parametrize("name", FAULTY)
def test_faulty_workload_names_the_culprit_and_its_group(name: str) -> None:
    meta = _scenario(name)
    scenario, truth = meta["scenario"], meta["truth"]
    analysis = analyze(workload_dir(name))
    assert analysis.root_cause == 0
    root, *rest = analysis.findings
    assert root.kind == scenario["expected_kind"], root.summary
    assert root.culprit_ranks == scenario["culprit_ranks"], root.summary
    assert root.group.desc == scenario["pg_desc"], root.summary
    if "group_ranks" in truth:
        assert list(root.group.ranks or ()) == truth["group_ranks"]
    # one fault, one root cause: everything else it explains
    assert all(f.consequence_of == 0 for f in rest), [(f.summary, f.consequence_of) for f in rest]


def _slot_ops(entries: list[dict[str, Any]], desc: str) -> dict[int, str]:
    return {e["collective_seq_id"]: _op(e) for e in entries if e["process_group"][1] == desc}


@pytest.mark.parametrize("name", ["mesh2d_hang", "mesh2d_skip"])
def test_2d_mesh_dp_waits_are_consequences_of_the_tp_culprit(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = _scenario(name)["truth"]
    culprit = truth["culprit_ranks"][0]
    entries = _entries(name)
    # the fixture is what it claims: the culprit's tp peer and the other dp pair went on
    # past it, so its absence shows in tp and in dp
    peer = next(r for r in truth["group_ranks"] if r != culprit)
    assert max(_slot_ops(entries[peer], "mesh_tp")) > max(_slot_ops(entries[culprit], "mesh_tp"))
    others = [r for r in entries if r not in truth["group_ranks"]]
    assert any(
        max(_slot_ops(entries[r], "mesh_dp")) > max(_slot_ops(entries[peer], "mesh_dp"))
        or max(_slot_ops(entries[r], "mesh_dp")) > max(_slot_ops(entries[culprit], "mesh_dp"))
        for r in others
    )

    out = tmp_path / "verdict.json"
    assert main(["analyze", str(workload_dir(name)), "--format", "json", "-o", str(out)]) == 1
    verdict = json.loads(out.read_text())
    root = verdict["findings"][verdict["root_cause"]]
    assert root["process_group"]["desc"] == "mesh_tp"
    assert root["process_group"]["ranks"] == truth["group_ranks"]
    assert root["culprit_ranks"] == [culprit] and root["consequence_of"] is None
    dp = [f for f in verdict["findings"] if f["process_group"]["desc"] == "mesh_dp"]
    assert dp, "the dp waits are reported"
    assert all(f["consequence_of"] == verdict["root_cause"] for f in dp)


def test_scatter_gather_and_uneven_all_to_all_are_not_mismatches() -> None:
    name = "data_shuffle_healthy"
    entries = _entries(name)
    by_op: dict[str, list[dict[str, Any]]] = {}
    for rank_entries in entries.values():
        for entry in rank_entries:
            by_op.setdefault(_op(entry), []).append(entry)
    # what makes these ops hard: only the root records scatter's input list and gather's
    # output list (no tensor, no dtype on the others), and all_to_all's sizes differ
    for op, side in (("scatter", "input"), ("gather", "output")):
        assert {bool(e[f"{side}_dtypes"]) for e in by_op[op]} == {True, False}
    assert len({tuple(map(tuple, e["input_sizes"])) for e in by_op["all_to_all"]}) > 1
    analysis = analyze(workload_dir(name))
    assert analysis.findings == [], [f.summary for f in analysis.findings]


def test_distribute_tensor_scatter_is_not_a_dtype_mismatch() -> None:
    name = "dtensor_tp_healthy"
    scatters = [e for es in _entries(name).values() for e in es if _op(e) == "scatter"]
    assert scatters and {e["process_group"][1] for e in scatters} == {"mesh_tp"}
    assert {len(e["input_dtypes"]) for e in scatters} == {0, 1}
    assert analyze(workload_dir(name)).findings == []


def test_functional_all_gather_as_gloo_records_it_breaks_no_shape_rule() -> None:
    name = "functional_healthy"
    gathers = [e for es in _entries(name).values() for e in es if _op(e) == "all_gather"]
    world = _scenario(name)["world"]

    def numel(sizes: list[list[int]]) -> int:
        total = 0
        for shape in sizes:
            n = 1
            for dim in shape:
                n *= dim
            total += n
        return total

    # gloo records all_gather_into_tensor_coalesced's output as the first member's chunk
    assert world > 1 and gathers
    assert all(numel(e["output_sizes"]) == numel(e["input_sizes"]) for e in gathers)
    assert analyze(workload_dir(name)).findings == []


def _gaps(entries: list[dict[str, Any]]) -> set[int]:
    """Collective sequence numbers that follow numbers no entry holds."""
    seqs = [e["collective_seq_id"] for e in entries]
    return {b for a, b in itertools.pairwise(seqs) if b > a + 1}


@pytest.mark.parametrize("name", ["objects_healthy", "objects_hang"])
def test_monitored_barrier_sequence_gap_is_not_a_skip(name: str) -> None:
    entries = _entries(name)
    # monitored_barrier consumes collective sequence numbers and records nothing: the same
    # gap on every rank whose entries go past it
    gaps = {rank: _gaps(es) for rank, es in entries.items()}
    first = min(min(g) for g in gaps.values() if g)
    past = [r for r, es in entries.items() if es[-1]["collective_seq_id"] >= first]
    assert past and all(first in gaps[r] for r in past), gaps
    analysis = analyze(workload_dir(name))
    assert "skipped_collective" not in {f.kind for f in analysis.findings}
    culprits = _scenario(name)["truth"]["culprit_ranks"]
    assert [f.culprit_ranks for f in analysis.findings] == ([culprits] if culprits else [])
