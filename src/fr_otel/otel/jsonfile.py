"""OTLP JSON lines files, as the Collector's ``otlpjsonfile`` receiver and file exporter
use them: one ``TracesData`` object per line, ids in hex, enums as integers, 64-bit
integers as decimal strings (opentelemetry-proto's JSON encoding rules)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _recode_ids(node: Any, convert: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str) and value:
                node[key] = convert(value)
            else:
                _recode_ids(value, convert)
    elif isinstance(node, list):
        for item in node:
            _recode_ids(item, convert)


def to_otlp_json(request: ExportTraceServiceRequest | TracesData) -> dict[str, Any]:
    """A request as an OTLP JSON object (protobuf's own JSON uses base64 ids and enum names)."""
    data: dict[str, Any] = json_format.MessageToDict(request, use_integers_for_enums=True)
    _recode_ids(data, lambda b64: base64.b64decode(b64).hex())
    return data


def from_otlp_json(data: dict[str, Any]) -> TracesData:
    """The inverse of ``to_otlp_json``."""
    data = json.loads(json.dumps(data))  # a copy we may change
    _recode_ids(data, lambda hexa: base64.b64encode(bytes.fromhex(hexa)).decode())
    traces: TracesData = json_format.ParseDict(data, TracesData(), ignore_unknown_fields=True)
    return traces


def write_otlp_json(requests: Iterable[ExportTraceServiceRequest], path: Path) -> int:
    """Write one line per request; return the number of spans written."""
    spans = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for request in requests:
            handle.write(json.dumps(to_otlp_json(request), separators=(",", ":")) + "\n")
            spans += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
    return spans


def read_otlp_json(path: Path) -> list[TracesData]:
    """Every ``TracesData`` line of an OTLP JSON lines file."""
    with path.open(encoding="utf-8") as handle:
        return [from_otlp_json(json.loads(line)) for line in handle if line.strip()]
