"""Spans from canonical rows: deterministic ids, one trace per collective across ranks,
request size budget, OTLP JSON files, and equality with the OpenTelemetry SDK's encoding."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status as SdkStatus
from opentelemetry.trace.status import StatusCode

from fr_otel import __version__
from fr_otel.archive import import_dumps
from fr_otel.otel import model
from fr_otel.otel.encode import encode_requests
from fr_otel.otel.jsonfile import read_otlp_json, write_otlp_json
from fr_otel.sim import FleetSpec, simulate, write_fleet


@pytest.fixture(scope="module")
def fleet_table(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    root = tmp_path_factory.mktemp("otel")
    write_fleet(simulate(FleetSpec(world=8, entries=200, fault="gpu_hang")), root / "d")
    report = import_dumps([root / "d"], archive=root / "a", job="llama", incident="i1")
    import pyarrow.parquet as pq

    return pa.concat_tables(pq.read_table(p) for p in report.files_written)


def _spans(requests: list[ExportTraceServiceRequest]) -> list[tuple[int, Span]]:
    out = []
    for request in requests:
        for resource_spans in request.resource_spans:
            rank = next(
                a.value.int_value for a in resource_spans.resource.attributes if a.key == model.RANK
            )
            out.extend((rank, span) for s in resource_spans.scope_spans for span in s.spans)
    return out


def _attrs(span: Span) -> dict[str, object]:
    return {a.key: a.value for a in span.attributes}


def test_every_row_is_a_span_with_one_trace_per_collective(fleet_table: pa.Table) -> None:
    requests = list(encode_requests(fleet_table))
    spans = _spans(requests)
    assert len(spans) == fleet_table.num_rows
    by_trace: dict[bytes, set[int]] = {}
    for rank, span in spans:
        attrs = _attrs(span)
        if model.COLLECTIVE_SEQ_ID in attrs:
            by_trace.setdefault(span.trace_id, set()).add(rank)
        assert len(span.trace_id) == 16 and any(span.trace_id)
        assert len(span.span_id) == 8 and any(span.span_id)
    # a default-group collective: every rank's span in the same trace
    assert max(len(ranks) for ranks in by_trace.values()) == 8
    assert len({span.span_id for _, span in spans}) == len(spans)
    # re-encoding gives the same ids
    again = _spans(list(encode_requests(fleet_table)))
    assert [(s.trace_id, s.span_id) for _, s in again] == [
        (s.trace_id, s.span_id) for _, s in spans
    ]


def test_unfinished_work_is_an_error_with_error_type(fleet_table: pa.Table) -> None:
    spans = [span for _, span in _spans(list(encode_requests(fleet_table)))]
    errors = [s for s in spans if s.status.code == Status.STATUS_CODE_ERROR]
    assert errors and len(errors) < len(spans)
    assert {_attrs(s)[model.ERROR_TYPE].string_value for s in errors} <= {
        "timeout",
        "not_completed",
    }  # type: ignore[attr-defined]
    assert all(s.end_time_unix_nano >= s.start_time_unix_nano for s in spans)


def test_requests_stay_under_the_byte_budget(fleet_table: pa.Table) -> None:
    requests = list(encode_requests(fleet_table, max_bytes=50_000))
    assert len(requests) > 3
    assert all(r.ByteSize() <= 50_000 for r in requests)
    assert sum(len(_spans([r])) for r in requests) == fleet_table.num_rows
    # the wire bytes decode with the official classes
    for request in requests:
        assert ExportTraceServiceRequest.FromString(request.SerializeToString()) == request


def test_otlp_json_lines_round_trip(fleet_table: pa.Table, tmp_path: Path) -> None:
    requests = list(encode_requests(fleet_table, max_bytes=200_000))
    path = tmp_path / "spans.jsonl"
    assert write_otlp_json(requests, path) == fleet_table.num_rows
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(first["traceId"]) == 32 and int(first["traceId"], 16)  # hex, not base64
    assert first["kind"] == 1 and isinstance(first["startTimeUnixNano"], str)
    decoded = read_otlp_json(path)
    assert [list(d.resource_spans) for d in decoded] == [list(r.resource_spans) for r in requests]


def test_same_spans_as_the_sdk_encoder(fleet_table: pa.Table) -> None:
    """Our fast path must produce what the SDK's OTLP encoder produces for the same data."""
    (request,) = encode_requests(fleet_table.slice(0, 50))
    ours = request.resource_spans[0]
    scope = InstrumentationScope(model.SCOPE_NAME, __version__)
    resource = Resource(
        {a.key: _plain(a.value) for a in ours.resource.attributes}  # type: ignore[arg-type]
    )
    sdk_spans = []
    for span in ours.scope_spans[0].spans:
        error = span.status.code == Status.STATUS_CODE_ERROR
        sdk_spans.append(
            ReadableSpan(
                name=span.name,
                context=SpanContext(
                    int.from_bytes(span.trace_id, "big"),
                    int.from_bytes(span.span_id, "big"),
                    is_remote=False,
                    trace_flags=TraceFlags(0),
                ),
                resource=resource,
                attributes={a.key: _plain(a.value) for a in span.attributes},  # type: ignore[misc]
                kind=SpanKind.INTERNAL,
                status=SdkStatus(StatusCode.ERROR, span.status.message)
                if error
                else SdkStatus(StatusCode.UNSET),
                start_time=span.start_time_unix_nano,
                end_time=span.end_time_unix_nano,
                instrumentation_scope=scope,
            )
        )
    theirs = encode_spans(sdk_spans).resource_spans[0]
    assert list(theirs.resource.attributes) == list(ours.resource.attributes)
    assert theirs.scope_spans[0].scope == ours.scope_spans[0].scope
    for a, b in zip(theirs.scope_spans[0].spans, ours.scope_spans[0].spans, strict=True):
        for field in (
            "trace_id",
            "span_id",
            "name",
            "kind",
            "start_time_unix_nano",
            "end_time_unix_nano",
            "status",
        ):
            assert getattr(a, field) == getattr(b, field), field
        assert list(a.attributes) == list(b.attributes)
        assert a.flags & 0xFF == b.flags & 0xFF


def _plain(value: object) -> object:
    kind = value.WhichOneof("value")  # type: ignore[attr-defined]
    if kind == "array_value":
        return tuple(_plain(v) for v in value.array_value.values)  # type: ignore[attr-defined]
    return getattr(value, kind)


def test_export_command_writes_the_file(tmp_path: Path, fleet_table: pa.Table) -> None:
    from fr_otel.cli import main

    archive = tmp_path / "a"
    import_dumps([Path(__file__).resolve().parents[1] / "data" / "gloo_healthy"], archive=archive)
    assert main(["export", str(archive), "--otlp-json", str(tmp_path / "o.jsonl")]) == 0
    (data,) = read_otlp_json(tmp_path / "o.jsonl")
    assert {r.resource.attributes[0].value.string_value for r in data.resource_spans} == {"default"}
    assert len(data.resource_spans) == 4
