"""Canonical rows -> OTLP ``ExportTraceServiceRequest`` messages, built from the columns.

Spans are built straight from the Arrow columns into the official protobuf classes
(``opentelemetry-proto``), without the SDK's tracer, processors and queues. Requests are
cut to stay under a byte budget (gRPC's default limit is 4 MiB).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from fr_otel import __version__
from fr_otel.otel import model
from fr_otel.otel.plan import (
    SPAN_COLUMNS,
    SPAN_PLAN,
    SpanAttribute,
    error_message,
    error_type,
    rank_resource,
)
from fr_otel.schema import is_done_entry, is_p2p_entry

MAX_REQUEST_BYTES = 3_500_000
"""Under gRPC's default 4 MiB message limit, with room for the request's envelope."""


def _value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, (list, tuple)):
        return AnyValue(array_value=ArrayValue(values=[_value(v) for v in value]))
    return AnyValue(string_value=str(value))


def key_value(key: str, value: Any) -> KeyValue:
    """One attribute: ``value`` as an ``AnyValue`` (bool, int, float, list, else text)."""
    return KeyValue(key=key, value=_value(value))


def _compiled(*, p2p: bool) -> list[tuple[SpanAttribute, str, str, bool, bool]]:
    """The attributes an entry that is (or is not) point-to-point carries, as tuples for
    ``row_to_span``'s loop: it runs once per attribute of every span, where a method call
    each costs a noticeable part of the encoding."""
    return [
        (a, a.column, a.key, a.form == "value", a.optional) for a in SPAN_PLAN if a.applies(p2p=p2p)
    ]


_PLAN = {True: _compiled(p2p=True), False: _compiled(p2p=False)}


def row_to_span(row: dict[str, Any]) -> Span:
    """One canonical row as an OTLP span (its attributes: ``plan.SPAN_PLAN``)."""
    if "run_id" not in row:  # a row from before runs had ids
        row = {**row, "run_id": None}
    is_p2p = is_p2p_entry(is_p2p=row["is_p2p"], op=row["op"])
    key = model.trace_key(
        job=row["job"],
        pg_name=row["pg_name"],
        pg_ranks=row["pg_ranks"],
        collective_seq_id=row["collective_seq_id"],
        is_p2p=is_p2p,
        rank=row["rank"],
        p2p_seq_id=row["p2p_seq_id"],
        run_id=row["run_id"],
    )
    start = row["time_created_ns"] or 0
    done = is_done_entry(state=row["state"], backend=row["backend"], retired=row["retired"])
    # Done: its completion (gloo records none: a zero-length span says "done, duration
    # unknown"). Not done: still in flight when the buffer was dumped.
    end = max((row["time_completed_ns"] if done else row["dump_time_ns"]) or start, start)
    attributes: list[KeyValue] = []
    append = attributes.append
    for attribute, column, attribute_key, plain, optional in _PLAN[is_p2p]:
        # a row written before an optional column existed (``api``) has no such key
        value = row.get(column) if optional else row[column]
        if plain:  # SpanAttribute.pairs of a "value" attribute, inlined: most of them
            if value is not None or not optional:
                append(key_value(attribute_key, value))
        else:
            for name, pair_value in attribute.pairs(value):
                append(key_value(name, pair_value))
    status = Status()
    if not done:
        kind = error_type(
            retired=row["retired"],
            timeout_ms=row["timeout_ms"],
            start_ns=start,
            dump_time_ns=row["dump_time_ns"],
        )
        attributes.append(key_value(model.ERROR_TYPE, kind))
        status = Status(
            code=Status.STATUS_CODE_ERROR, message=error_message(row["op"], row["state"])
        )
    return Span(
        trace_id=model.trace_id(key),
        span_id=model.span_id(key, row["rank"], row["record_id"]),
        name=row["op"],
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=attributes,
        status=status,
    )


def _resource(job: str, rank: int, extra: Mapping[str, str | int] | None) -> ResourceSpans:
    resource_spans = ResourceSpans()
    resource_spans.resource.attributes.extend(
        [key_value(key, value) for key, value in model.resource_attributes(job, rank, extra)]
    )
    return resource_spans


def encode_requests(
    table: pa.Table,
    *,
    max_bytes: int = MAX_REQUEST_BYTES,
    resource: Mapping[str, str | int] | None = None,
) -> Iterator[ExportTraceServiceRequest]:
    """Requests holding every row of ``table`` as a span, each under ``max_bytes``.

    One ``ResourceSpans`` per rank (per job) within a request; ``resource`` adds
    attributes to every rank's resource (``model.resource_attributes``).
    """
    columns = {
        name: table.column(name).to_pylist()
        if name in table.column_names
        else [None] * table.num_rows  # run_id, host: in archives written before them
        for name in SPAN_COLUMNS
    }
    rows = [
        dict(zip(SPAN_COLUMNS, values, strict=True))
        for values in zip(*columns.values(), strict=True)
    ]
    request = ExportTraceServiceRequest()
    size = 0
    current: dict[tuple[str, int], ScopeSpans] = {}
    for row in sorted(rows, key=lambda r: (r["job"], r["rank"], r["record_id"])):
        span = row_to_span(row)
        span_size = span.ByteSize() + 16
        if current and size + span_size > max_bytes:
            yield request
            request, size, current = ExportTraceServiceRequest(), 0, {}
        scope = current.get((row["job"], row["rank"]))
        if scope is None:
            resource_spans = _resource(
                row["job"], row["rank"], rank_resource(resource, row["host"])
            )
            scope = resource_spans.scope_spans.add()
            scope.scope.name = model.SCOPE_NAME
            scope.scope.version = __version__
            request.resource_spans.append(resource_spans)
            # appending copies: keep the copy that lives in the request
            scope = request.resource_spans[-1].scope_spans[0]
            current[(row["job"], row["rank"])] = scope
            size += request.resource_spans[-1].ByteSize()
        scope.spans.append(span)
        size += span_size
    if current:
        yield request
