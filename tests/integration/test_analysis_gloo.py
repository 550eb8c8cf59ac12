"""``fr-otel analyze`` on real gloo dumps: every committed fault scenario, and the demo job.

These are the cases fr_trace gets wrong or cannot read: it crashes with KeyError on gloo's
broken pg_config, and blames whichever rank it read first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fr_otel.analysis import analyze
from fr_otel.cli import main

pytestmark = pytest.mark.gloo

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURES = sorted(p for p in DATA.glob("gloo_*") if (p / "scenario.json").is_file())
KIND = {"all_to_all_splits": "size_mismatch"}


@pytest.mark.parametrize("folder", FIXTURES, ids=lambda p: p.name)
def test_verdict_matches_the_injected_fault(folder: Path) -> None:
    scenario = json.loads((folder / "scenario.json").read_text())["scenario"]
    analysis = analyze(folder)
    assert analysis.missing_dumps == []
    if scenario["expected_kind"] == "none":
        assert analysis.findings == [] and analysis.root_cause is None
        return
    root = analysis.findings[analysis.root_cause or 0]
    assert root.kind == KIND.get(scenario["expected_kind"], scenario["expected_kind"]), root.summary
    assert root.culprit_ranks == scenario["culprit_ranks"], root.summary
    assert root.group.desc == scenario["pg_desc"]
    assert root.collective_seq_id == scenario["collective_seq_id"]
    # the code location: real stacks from the job, culprit against majority
    assert root.frames["majority"], "the majority's stack is shown"
    if root.kind != "size_mismatch" or "per_rank" not in root.evidence:
        assert all(root.frames["culprit"].values()), "the culprit's stack is shown"


def test_a_skip_inside_a_subgroup_explains_the_default_group_hang() -> None:
    analysis = analyze(DATA / "gloo_skipped_in_subgroup")
    root, *rest = analysis.findings
    assert root.kind == "skipped_collective" and root.group.desc == "back_group"
    assert rest and all(f.consequence_of == 0 for f in rest)
    assert {f.kind for f in rest} == {"missing_rank"}


def test_json_twins_and_text_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = DATA / "gloo_size_mismatch"
    assert main(["analyze", str(folder)]) == 1
    text = capsys.readouterr().out
    first = text.splitlines()[0]
    assert first.startswith("ROOT CAUSE: rank 1 passed sizes [[1000]] to all_reduce")
    assert "_worker.py" in text  # the user's call site, not torch's
    # JSON dumps alone (no stacks) give the same verdict
    json_only = tmp_path / "json"
    json_only.mkdir()
    for path in folder.glob("*.json"):
        if path.name != "scenario.json":
            (json_only / path.name).write_bytes(path.read_bytes())
    root = analyze(json_only).findings[0]
    assert (root.kind, root.culprit_ranks) == ("size_mismatch", [1])
