"""One OTLP trace export request, as the exporters and ``send_all`` take it.

A request is a ``Payload``: the protobuf message (``fr_otel.otel.encode``) or its
serialized bytes (``fr_otel.otel.wire``), sent as they are either way; bytes are parsed
only to count spans or to split them.
"""

from __future__ import annotations

from typing import TypeAlias

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

Payload: TypeAlias = "ExportTraceServiceRequest | bytes"
"""One export request: the message, or its serialization."""


def as_bytes(request: Payload) -> bytes:
    if type(request) is bytes:
        return request
    if isinstance(request, bytes):  # grpc's serializer wants exactly bytes, no subclass
        return bytes(request)
    payload: bytes = request.SerializeToString()
    return payload


def as_message(request: Payload) -> ExportTraceServiceRequest:
    """The message itself; bytes are parsed (``DecodeError`` when they are not one)."""
    if isinstance(request, bytes):
        message: ExportTraceServiceRequest = ExportTraceServiceRequest.FromString(request)
        return message
    return request


def span_count(request: Payload) -> int:
    """Spans in a request (unreadable bytes count as none)."""
    known = getattr(request, "span_count", None)
    if isinstance(known, int):
        return known
    try:
        message = as_message(request)
    except DecodeError:
        return 0
    return sum(len(scope.spans) for rs in message.resource_spans for scope in rs.scope_spans)
