"""Jaeger JSON: the shape Jaeger UI's Upload accepts (``{"data": [trace, ...]}``), one trace
per collective, each rank a process, typed tags, microsecond times.

Jaeger publishes no JSON Schema; the checks follow its model (``model/json/model.go``).
"""

from __future__ import annotations

import json
from pathlib import Path

from fr_otel.archive import import_dumps
from fr_otel.cli import main
from fr_otel.otel import model

DATA = Path(__file__).resolve().parents[1] / "data"
TAG_TYPES = {"string": str, "bool": bool, "int64": int, "float64": float, "binary": str}


def test_jaeger_json_of_a_real_gloo_job(tmp_path: Path) -> None:
    archive = tmp_path / "a"
    report = import_dumps([DATA / "gloo_size_mismatch"], archive=archive, job="gl", incident="i")
    assert main(["export", str(archive), "--jaeger-json", str(tmp_path / "j.json")]) == 0
    document = json.loads((tmp_path / "j.json").read_text())
    assert set(document) == {"data"}
    spans = [s for trace in document["data"] for s in trace["spans"]]
    assert len(spans) == report.entries
    for trace in document["data"]:
        assert len(trace["traceID"]) == 32
        processes = trace["processes"]
        for span in trace["spans"]:
            assert span["traceID"] == trace["traceID"] and len(span["spanID"]) == 16
            assert span["processID"] in processes
            assert isinstance(span["startTime"], int) and isinstance(span["duration"], int)
            assert span["startTime"] < 10**17  # microseconds, not nanoseconds
            for tag in span["tags"]:
                assert isinstance(tag["value"], TAG_TYPES[tag["type"]]), tag
        for process in processes.values():
            assert process["serviceName"] == "gl"
    # the mismatched collective: one trace, every rank's span in it, each rank a process,
    # and all of them errors (it never completed)
    last = max(
        document["data"],
        key=lambda t: max(
            tag["value"]
            for s in t["spans"]
            for tag in s["tags"]
            if tag["key"] == model.COLLECTIVE_SEQ_ID
        ),
    )
    assert len(last["spans"]) == 3 and len(last["processes"]) == 3
    for span in last["spans"]:
        tags = {t["key"]: t["value"] for t in span["tags"]}
        assert tags["error"] is True and tags[model.ERROR_TYPE] in ("timeout", "not_completed")


def test_export_needs_a_destination(tmp_path: Path) -> None:
    archive = tmp_path / "a"
    import_dumps([DATA / "gloo_healthy"], archive=archive)
    assert main(["export", str(archive)]) == 2
