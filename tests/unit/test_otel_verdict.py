"""Findings as verdict spans, in the same trace as the collective they are about."""

from __future__ import annotations

import json
from pathlib import Path

from fr_otel.analysis import analyze
from fr_otel.archive import import_dumps
from fr_otel.cli import main
from fr_otel.otel import model
from fr_otel.otel.verdict import verdict_spans

DATA = Path(__file__).resolve().parents[1] / "data"


def test_verdicts_join_the_traces_of_their_collectives(tmp_path: Path) -> None:
    archive = tmp_path / "a"
    import_dumps([DATA / "gloo_skipped_in_subgroup"], archive=archive, job="gl", incident="i")
    assert (
        main(["export", str(archive), "--findings", "--jaeger-json", str(tmp_path / "j.json")]) == 0
    )
    traces = json.loads((tmp_path / "j.json").read_text())["data"]
    with_verdict = [
        t for t in traces if any(s["operationName"] == model.VERDICT_SPAN_NAME for s in t["spans"])
    ]
    analysis = analyze(archive)
    assert len(with_verdict) == len(analysis.findings) == 2
    root_trace = next(
        t
        for t in with_verdict
        for s in t["spans"]
        if any(tag["key"] == model.FINDING_ROOT_CAUSE and tag["value"] is True for tag in s["tags"])
    )
    # the root cause (rank 2 skipped back_group #3) sits beside the three ranks' spans
    ops = sorted(s["operationName"] for s in root_trace["spans"])
    assert ops == ["all_gather", "all_reduce", "all_reduce", model.VERDICT_SPAN_NAME]
    verdict = next(s for s in root_trace["spans"] if s["operationName"] == model.VERDICT_SPAN_NAME)
    tags = {t["key"]: t["value"] for t in verdict["tags"]}
    assert tags[model.FINDING_KIND] == "skipped_collective"
    assert json.loads(tags[model.FINDING_CULPRIT_RANKS]) == [2]
    assert tags["error"] is True


def test_a_healthy_job_has_no_verdict(tmp_path: Path) -> None:
    import_dumps([DATA / "gloo_healthy"], archive=tmp_path / "a")
    assert not verdict_spans(analyze(tmp_path / "a")).resource_spans
