"""The three OTLP signals fr_otel sends, and where each goes on the Collector path the spans
take: traces (the spans), logs and metrics (an incident's log record and count,
``otel.incident``).

Logs and metrics go where the traces go, with the same settings (headers, TLS,
compression, timeout): over gRPC the same target's ``LogsService`` or ``MetricsService``;
over HTTP the traces URL with ``/v1/logs`` or ``/v1/metrics`` for its ``/v1/traces`` (a
traces URL of another path gives none: ``signal_url``).

A logs or metrics request travels as its serialized bytes in a class that names its
signal (``LogsRequest``, ``MetricsRequest``), so the delivery and the spool built for
spans take it as it is: it counts as no spans, is never split, and is spooled in its
signal's own folder (``spool_dir``).
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import ClassVar

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from fr_otel.config import OTLP_TRACES_PATH

_SERVICES = {
    "traces": "opentelemetry.proto.collector.trace.v1.TraceService",
    "logs": "opentelemetry.proto.collector.logs.v1.LogsService",
    "metrics": "opentelemetry.proto.collector.metrics.v1.MetricsService",
}
_REQUESTS: dict[str, type[Message]] = {
    "traces": ExportTraceServiceRequest,
    "logs": ExportLogsServiceRequest,
    "metrics": ExportMetricsServiceRequest,
}


class Signal(enum.Enum):
    TRACES = "traces"
    LOGS = "logs"
    METRICS = "metrics"

    @property
    def http_path(self) -> str:
        """``/v1/traces``, ``/v1/logs``, ``/v1/metrics``."""
        return f"/v1/{self.value}"

    @property
    def grpc_method(self) -> str:
        """The gRPC method of its ``Export``. Every answer reads as a trace answer: the
        partial success's fields have the same numbers and types in all three."""
        return f"/{_SERVICES[self.value]}/Export"

    def spool_dir(self, spool_dir: Path) -> Path:
        """Where its undelivered requests wait: the spool itself for spans (as it always
        was), a folder of its own for the others, so each is read back as what it is."""
        return spool_dir if self is Signal.TRACES else spool_dir / self.value

    def parse(self, payload: bytes) -> Message:
        """The request ``payload`` holds (``DecodeError`` when it holds none)."""
        return _REQUESTS[self.value].FromString(payload)


class SignalRequest(bytes):
    """A serialized request of another signal than traces, sent as it is."""

    signal: ClassVar[Signal]
    span_count: ClassVar[int] = 0
    """It holds no spans (``payload.span_count`` reads this first)."""


class LogsRequest(SignalRequest):
    signal = Signal.LOGS


class MetricsRequest(SignalRequest):
    signal = Signal.METRICS


def signal_request(signal: Signal, payload: bytes) -> bytes:
    """``payload`` as a request of ``signal``: as it is for spans, else in the class that
    names its signal."""
    if signal is Signal.LOGS:
        return LogsRequest(payload)
    if signal is Signal.METRICS:
        return MetricsRequest(payload)
    return payload


def signal_of(request: object) -> Signal:
    """The signal of a request as the delivery takes it (a message or bytes of spans
    unless its class names another)."""
    if isinstance(request, SignalRequest):
        return request.signal
    if isinstance(request, ExportLogsServiceRequest):
        return Signal.LOGS
    if isinstance(request, ExportMetricsServiceRequest):
        return Signal.METRICS
    return Signal.TRACES


def signal_url(traces_url: str, signal: Signal) -> str | None:
    """The OTLP/HTTP URL of ``signal`` beside ``traces_url`` (see the module's docstring)."""
    if signal is Signal.TRACES:
        return traces_url
    base, found, rest = traces_url.rpartition(OTLP_TRACES_PATH)
    if not found or rest.strip("/"):
        return None
    return base + signal.http_path
