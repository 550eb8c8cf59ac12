"""OTLP JSON lines read as JSON (``SpanRows.add_json``, what ``fr-otel import`` does) give
the rows protobuf's own JSON parser gives (``from_otlp_json``, the reference), in either
field spelling, and refuse what it refuses, and also a list or text where an object
belongs, which it reads as an empty object."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from fr_otel.archive import import_dumps
from fr_otel.archive.spans_file import read_spans_file
from fr_otel.cli import main
from fr_otel.otel.jsonfile import from_otlp_json, json_attributes, read_otlp_json
from fr_otel.otel.otlp_import import SpanRows, import_traces
from fr_otel.sim import FleetSpec, simulate, write_fleet

DATA = Path(__file__).resolve().parents[1] / "data"


def _proto_names(node: Any) -> Any:
    """The same JSON with protobuf's field names (``start_time_unix_nano``), which its
    parser takes too, times as numbers and status codes by their enum names."""
    if isinstance(node, list):
        return [_proto_names(item) for item in node]
    if not isinstance(node, dict):
        return node
    renamed = {}
    for key, value in node.items():
        name = "".join(f"_{c.lower()}" if c.isupper() else c for c in key)
        if key in ("startTimeUnixNano", "endTimeUnixNano"):
            value = int(value)
        elif key == "status" and value.get("code") == 2:
            value = {**value, "code": "STATUS_CODE_ERROR"}
        renamed[name] = _proto_names(value)
    return renamed


@pytest.fixture(scope="module")
def spans_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """fr-otel export's OTLP JSON lines of a simulated fleet with a hang and real gloo
    dumps (p2p, retired work, errors), in one file."""
    root = tmp_path_factory.mktemp("spans")
    write_fleet(simulate(FleetSpec(world=8, entries=300, fault="gpu_hang")), root / "nccl")
    lines = []
    for name, source in (("nccl", root / "nccl"), ("gloo", DATA / "gloo_size_mismatch")):
        import_dumps([source], archive=root / name / "archive", job=name, incident="i")
        out = root / f"{name}.jsonl"
        assert main(["export", str(root / name / "archive"), "--otlp-json", str(out)]) == 0
        lines.append(out.read_text())
    path = root / "spans.jsonl"
    path.write_text("".join(lines))
    return path


def test_a_file_reads_as_protobufs_parser_reads_it(spans_file: Path) -> None:
    reference = import_traces(read_otlp_json(spans_file)).table
    read = read_spans_file(spans_file)
    assert read.problem is None
    assert read.table is not None and read.table.num_rows == reference.num_rows > 2_000
    assert read.table.equals(reference)
    assert set(read.table["job"].to_pylist()) == {"nccl", "gloo"}


def test_protobufs_field_names_read_the_same(spans_file: Path, tmp_path: Path) -> None:
    lines = spans_file.read_text().splitlines()
    renamed = tmp_path / "renamed.jsonl"
    renamed.write_text("".join(json.dumps(_proto_names(json.loads(x))) + "\n" for x in lines))
    assert '"start_time_unix_nano": 1' in renamed.read_text()
    assert "STATUS_CODE_ERROR" in renamed.read_text()
    read = read_spans_file(renamed)
    assert read.problem is None and read.table is not None
    assert read.table.equals(import_traces(read_otlp_json(spans_file)).table)


def _reference(items: list[dict[str, Any]]) -> dict[str, Any]:
    """What protobuf's parser makes of OTLP JSON attributes (as ``otlp_import`` reads a
    message's)."""
    data = {"resourceSpans": [{"resource": {"attributes": items}}]}
    message = json_format.ParseDict(data, TracesData(), ignore_unknown_fields=True)
    kept: list[KeyValue] = list(message.resource_spans[0].resource.attributes)
    from fr_otel.otel.otlp_import import _attributes

    return _attributes(kept)


ATTRIBUTES = [
    {"key": "text", "value": {"stringValue": "all_reduce"}},
    {"key": "empty_text", "value": {"stringValue": ""}},
    {"key": "int_text", "value": {"intValue": "-9223372036854775808"}},
    {"key": "int_number", "value": {"intValue": 42}},
    {"key": "int_float", "value": {"intValue": 7.0}},
    {"key": "flag", "value": {"boolValue": True}},
    {"key": "number", "value": {"doubleValue": 2.5}},
    {"key": "number_text", "value": {"doubleValue": "1e3"}},
    {"key": "infinite", "value": {"doubleValue": "-Infinity"}},
    {"key": "raw", "value": {"bytesValue": "AAEC_w"}},
    {"key": "raw_standard", "value": {"bytesValue": "AAEC/w=="}},
    {"key": "list", "value": {"arrayValue": {"values": [{"intValue": "1"}, {}]}}},
    {"key": "empty_list", "value": {"arrayValue": {}}},
    {"key": "map", "value": {"kvlistValue": {"values": [{"key": "a", "value": {}}]}}},
    {"key": "no_value"},
    {"key": "null_value", "value": None},
    {"key": "unset_kind", "value": {"stringValue": None}},
    {"key": "unknown_kind", "value": {"futureValue": 1}},
    {"key": "proto_name", "value": {"int_value": "3"}},
    {"value": {"stringValue": "keyless"}},
    {"key": "text", "value": {"stringValue": "the last of a repeated key wins"}},
]


def test_every_kind_of_value_reads_as_protobufs_parser_reads_it() -> None:
    ours, reference = json_attributes(ATTRIBUTES), _reference(ATTRIBUTES)
    assert ours == reference
    assert ours["raw"] == b"\x00\x01\x02\xff" and math.isinf(ours["infinite"])
    assert ours["list"] == [1, None] and ours["text"].startswith("the last")


def test_nan_reads_as_nan() -> None:
    items = [{"key": "n", "value": {"doubleValue": "NaN"}}]
    assert math.isnan(json_attributes(items)["n"]) and math.isnan(_reference(items)["n"])


@pytest.mark.parametrize(
    "value",
    [
        {"intValue": "twelve"},
        {"intValue": "9223372036854775808"},
        {"intValue": 1.5},
        {"intValue": True},
        {"stringValue": 5},
        {"boolValue": "true"},
        {"doubleValue": "fast"},
        {"arrayValue": {"values": {"intValue": "1"}}},
        {"arrayValue": {"values": [None]}},
    ],
)
def test_a_value_protobufs_parser_refuses_is_refused(value: object) -> None:
    items = [{"key": "k", "value": value}]
    with pytest.raises(json_format.ParseError):
        _reference(items)
    with pytest.raises(ValueError):
        json_attributes(items)


@pytest.mark.parametrize(
    "line",
    [
        {"resourceSpans": {"resource": {}}},
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 3}]}]}]},
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "-1"}]}]}]},
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": {"k": "v"}}]}]}]},
    ],
)
def test_a_line_that_is_not_otlp_json_is_named_corrupt_by_its_number(
    line: dict[str, Any], spans_file: Path, tmp_path: Path
) -> None:
    with pytest.raises((json_format.ParseError, ValueError, TypeError)):
        from_otlp_json(line)
    with pytest.raises(ValueError):
        SpanRows().add_json(line)
    path = tmp_path / "bad.jsonl"
    first = spans_file.read_text().splitlines()[0]
    path.write_text(first + "\n" + json.dumps(line) + "\n")
    read = read_spans_file(path)
    assert read.table is None and read.problem is not None
    assert (read.problem.problem, read.problem.detail.split(":")[0]) == (
        "corrupt",
        "line 2 is not OTLP JSON",
    )


@pytest.mark.parametrize(
    "line",
    [
        {"resourceSpans": [{"resource": []}]},
        {"resourceSpans": [{"resource": {"attributes": [{"key": "k", "value": "text"}]}}]},
        {"resourceSpans": [{"resource": {"attributes": [{"value": {"kvlistValue": []}}]}}]},
    ],
)
def test_a_list_or_text_where_an_object_belongs_is_refused(line: dict[str, Any]) -> None:
    from_otlp_json(line)  # protobuf's parser reads them as empty objects
    with pytest.raises(ValueError, match="not an object"):
        SpanRows().add_json(line)
