"""A request the receiver finds too large, cut in two halves that keep their resource
and scope."""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from fr_otel.otel.payload import Payload, as_message
from fr_otel.otel.signals import Signal, signal_of


def _subset(source: ResourceSpans, picks: list[tuple[int, Span]]) -> ResourceSpans:
    """``source`` (resource and scopes kept) holding only the picked spans."""
    out = ResourceSpans(resource=source.resource, schema_url=source.schema_url)
    by_scope: dict[int, list[Span]] = {}
    for index, span in picks:
        by_scope.setdefault(index, []).append(span)
    for index, spans in by_scope.items():
        scope = source.scope_spans[index]
        out.scope_spans.append(
            ScopeSpans(scope=scope.scope, schema_url=scope.schema_url, spans=spans)
        )
    return out


def split_request(
    request: Payload,
) -> tuple[ExportTraceServiceRequest, ExportTraceServiceRequest] | None:
    """Two requests holding half of ``request`` each, or ``None`` for a single span or a
    request of another signal (an incident's log record or count is one item).

    Halves by resource (rank) when there are several, else by span, so each half keeps
    its resource and scope and the receiver sees the same data either way.
    """
    if signal_of(request) is not Signal.TRACES:
        return None
    resources = as_message(request).resource_spans
    if len(resources) > 1:
        middle = len(resources) // 2
        return (
            ExportTraceServiceRequest(resource_spans=resources[:middle]),
            ExportTraceServiceRequest(resource_spans=resources[middle:]),
        )
    if not resources:
        return None
    only = resources[0]
    spans = [(index, span) for index, scope in enumerate(only.scope_spans) for span in scope.spans]
    if len(spans) < 2:
        return None
    middle = len(spans) // 2
    return (
        ExportTraceServiceRequest(resource_spans=[_subset(only, spans[:middle])]),
        ExportTraceServiceRequest(resource_spans=[_subset(only, spans[middle:])]),
    )
