"""Jaeger JSON files that Jaeger UI's "Upload" loads without a backend.

The model is Jaeger's own (``model/json/model.go``, the ``/api/traces`` response):
``{"data": [trace, ...]}``, one trace per collective instance, each OTLP resource (one
rank) a Jaeger "process", times in microseconds, attributes as typed tags. The
conversion follows what Jaeger does with OTLP: scope -> ``otel.scope.*`` tags, span kind
-> ``span.kind``, status ERROR -> ``error=true`` plus ``otel.status_code`` and
``otel.status_description``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

_KINDS = {
    Span.SPAN_KIND_INTERNAL: "internal",
    Span.SPAN_KIND_SERVER: "server",
    Span.SPAN_KIND_CLIENT: "client",
    Span.SPAN_KIND_PRODUCER: "producer",
    Span.SPAN_KIND_CONSUMER: "consumer",
}


def _tag(key: str, value: AnyValue) -> dict[str, Any]:
    kind = value.WhichOneof("value")
    if kind == "bool_value":
        return {"key": key, "type": "bool", "value": value.bool_value}
    if kind == "int_value":
        return {"key": key, "type": "int64", "value": value.int_value}
    if kind == "double_value":
        return {"key": key, "type": "float64", "value": value.double_value}
    if kind == "bytes_value":
        return {"key": key, "type": "binary", "value": base64.b64encode(value.bytes_value).decode()}
    if kind == "string_value":
        return {"key": key, "type": "string", "value": value.string_value}
    # arrays and maps: Jaeger has no such tag type; it stores them as JSON text
    return {"key": key, "type": "string", "value": json.dumps(_plain(value))}


def _plain(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_plain(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _plain(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode()
    return getattr(value, kind) if kind else None


def _tags(attributes: Iterable[KeyValue]) -> list[dict[str, Any]]:
    return [_tag(kv.key, kv.value) for kv in attributes]


def to_jaeger(requests: Iterable[ExportTraceServiceRequest]) -> dict[str, Any]:
    """OTLP requests -> one Jaeger JSON document, traces and processes deduplicated."""
    traces: dict[str, dict[str, Any]] = {}
    for request in requests:
        for resource_spans in request.resource_spans:
            process_tags = _tags(resource_spans.resource.attributes)
            service = next(
                (t["value"] for t in process_tags if t["key"] == "service.name"), "unknown"
            )
            process_key = json.dumps(process_tags, sort_keys=True)
            for scope_spans in resource_spans.scope_spans:
                scope_tags = [
                    {"key": "otel.scope.name", "type": "string", "value": scope_spans.scope.name},
                    {
                        "key": "otel.scope.version",
                        "type": "string",
                        "value": scope_spans.scope.version,
                    },
                ]
                for span in scope_spans.spans:
                    trace_hex = span.trace_id.hex()
                    trace = traces.setdefault(
                        trace_hex,
                        {
                            "traceID": trace_hex,
                            "spans": [],
                            "processes": {},
                            "warnings": None,
                            "_ids": {},
                        },
                    )
                    process_id = trace["_ids"].get(process_key)
                    if process_id is None:
                        process_id = trace["_ids"][process_key] = f"p{len(trace['_ids']) + 1}"
                        trace["processes"][process_id] = {
                            "serviceName": service,
                            "tags": process_tags,
                        }
                    tags = _tags(span.attributes) + scope_tags
                    tags.append(
                        {
                            "key": "span.kind",
                            "type": "string",
                            "value": _KINDS.get(span.kind, "internal"),
                        }
                    )
                    if span.status.code == Status.STATUS_CODE_ERROR:
                        tags += [
                            {"key": "error", "type": "bool", "value": True},
                            {"key": "otel.status_code", "type": "string", "value": "ERROR"},
                            {
                                "key": "otel.status_description",
                                "type": "string",
                                "value": span.status.message,
                            },
                        ]
                    references = []
                    if span.parent_span_id:
                        references.append(
                            {
                                "refType": "CHILD_OF",
                                "traceID": trace_hex,
                                "spanID": span.parent_span_id.hex(),
                            }
                        )
                    trace["spans"].append(
                        {
                            "traceID": trace_hex,
                            "spanID": span.span_id.hex(),
                            "flags": 1,
                            "operationName": span.name,
                            "references": references,
                            "startTime": span.start_time_unix_nano // 1000,
                            "duration": max(span.end_time_unix_nano - span.start_time_unix_nano, 0)
                            // 1000,
                            "tags": tags,
                            "logs": [],
                            "processID": process_id,
                            "warnings": None,
                        }
                    )
    data = []
    for trace in traces.values():
        trace.pop("_ids")
        data.append(trace)
    return {"data": data}


def write_jaeger_json(requests: Iterable[ExportTraceServiceRequest], path: Path) -> int:
    """Write the Jaeger JSON document; return the number of spans."""
    document = to_jaeger(requests)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, separators=(",", ":")))
    return sum(len(t["spans"]) for t in document["data"])
