"""OTLP JSON lines back into an archive with ``fr-otel import``: the same verdict as the
dumps they came from."""

from __future__ import annotations

from pathlib import Path

from fr_otel.analysis import analyze
from fr_otel.archive import import_dumps
from fr_otel.cli import main

DATA = Path(__file__).resolve().parents[1] / "data"


def test_spans_round_trip_through_fr_otel_import(tmp_path: Path) -> None:
    original = tmp_path / "a"
    report = import_dumps(
        [DATA / "gloo_skipped_collective"], archive=original, job="gl", incident="i"
    )
    spans = tmp_path / "spans.jsonl"
    assert main(["export", str(original), "--otlp-json", str(spans)]) == 0
    again = tmp_path / "b"
    assert main(["import", str(spans), "--archive", str(again)]) == 0
    assert main(["import", str(spans), "--archive", str(again)]) == 0  # idempotent
    files = sorted(p.relative_to(again).as_posix() for p in again.rglob("*.parquet"))
    assert files == [f"job=gl/incident=i/rank-{r:06d}.parquet" for r in report.ranks]
    first, second = analyze(original), analyze(again)
    assert [(f.kind, f.culprit_ranks, f.collective_seq_id) for f in second.findings] == [
        (f.kind, f.culprit_ranks, f.collective_seq_id) for f in first.findings
    ]
    assert second.ranks == first.ranks and second.missing_dumps == []


def test_spans_and_dumps_are_imported_separately(tmp_path: Path) -> None:
    (tmp_path / "s.jsonl").write_text("")
    assert (
        main(
            [
                "import",
                str(tmp_path / "s.jsonl"),
                str(DATA / "gloo_healthy"),
                "--archive",
                str(tmp_path / "a"),
            ]
        )
        == 2
    )
