"""Canonical rows -> OTLP ``ExportTraceServiceRequest`` messages, built from the columns.

Spans are built straight from the Arrow columns into the official protobuf classes
(``opentelemetry-proto``), without the SDK's tracer, processors and queues. Requests are
cut to stay under a byte budget (gRPC's default limit is 4 MiB).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from fr_otel import __version__
from fr_otel.otel import model

MAX_REQUEST_BYTES = 3_500_000
"""Under gRPC's default 4 MiB message limit, with room for the request's envelope."""

_COLUMNS = (
    "job",
    "incident",
    "run_id",
    "rank",
    "pg_name",
    "pg_desc",
    "pg_ranks",
    "record_id",
    "collective_seq_id",
    "p2p_seq_id",
    "backend",
    "op",
    "peer",
    "is_p2p",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "state",
    "retired",
    "time_created_ns",
    "time_started_ns",
    "time_completed_ns",
    "dump_time_ns",
    "timeout_ms",
    "call_site",
)


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


def _kv(key: str, value: Any) -> KeyValue:
    return KeyValue(key=key, value=_value(value))


def _call_site(text: str | None) -> list[KeyValue]:
    """``file:line in function`` -> the semantic-convention ``code.*`` attributes."""
    if not text:
        return []
    where, _, function = text.rpartition(" in ")
    path, _, line = where.rpartition(":")
    out = [_kv(model.CODE_FUNCTION, function), _kv(model.CODE_FILE, path)]
    if line.isdigit():
        out.append(_kv(model.CODE_LINE, int(line)))
    return out


def _done(row: dict[str, Any]) -> bool:
    # same rule as the analyzer: gloo's only completion signal is retirement
    return row["state"] == "completed" or (row["backend"] == "gloo" and bool(row["retired"]))


def row_to_span(row: dict[str, Any]) -> Span:
    """One canonical row as an OTLP span."""
    is_p2p = bool(row["is_p2p"]) or row["op"] in ("send", "recv")
    key = model.trace_key(
        job=row["job"],
        pg_name=row["pg_name"],
        pg_ranks=row["pg_ranks"],
        collective_seq_id=row["collective_seq_id"],
        is_p2p=is_p2p,
        rank=row["rank"],
        p2p_seq_id=row["p2p_seq_id"],
        run_id=row.get("run_id"),
    )
    start = row["time_created_ns"] or 0
    done = _done(row)
    # Done: its completion (gloo records none: a zero-length span says "done, duration
    # unknown"). Not done: still in flight when the buffer was dumped.
    end = max((row["time_completed_ns"] if done else row["dump_time_ns"]) or start, start)
    attributes = [
        _kv(model.RANK, row["rank"]),
        _kv(model.PG_NAME, row["pg_name"]),
        _kv(model.OP, row["op"]),
        _kv(model.STATE, row["state"] or ""),
        _kv(model.RECORD_ID, row["record_id"]),
        _kv(model.INCIDENT, row["incident"]),
    ]
    if row.get("run_id") is not None:
        attributes.append(_kv(model.RUN_ID, row["run_id"]))
    for name, column in (
        (model.PG_DESC, "pg_desc"),
        (model.BACKEND, "backend"),
        (model.TIMEOUT_MS, "timeout_ms"),
        (model.PEER, "peer"),
        (model.INPUT_DTYPES, "input_dtypes"),
        (model.OUTPUT_DTYPES, "output_dtypes"),
    ):
        if row[column] is not None:
            attributes.append(_kv(name, row[column]))
    if row["pg_ranks"] is not None:
        attributes.append(_kv(model.PG_SIZE, len(row["pg_ranks"])))
        attributes.append(_kv(model.PG_RANKS, list(row["pg_ranks"])))
    if is_p2p:
        if row["p2p_seq_id"] is not None:
            attributes.append(_kv(model.P2P_SEQ_ID, row["p2p_seq_id"]))
    elif row["collective_seq_id"] is not None:
        attributes.append(_kv(model.COLLECTIVE_SEQ_ID, row["collective_seq_id"]))
    # shapes are lists of lists, which attribute values cannot hold: JSON text
    for name, column in ((model.INPUT_SIZES, "input_sizes"), (model.OUTPUT_SIZES, "output_sizes")):
        if row[column] is not None:
            attributes.append(_kv(name, json.dumps(row[column], separators=(",", ":"))))
    attributes.extend(_call_site(row["call_site"]))
    status = Status()
    if not done:
        pending_ns = (row["dump_time_ns"] or start) - start
        timeout_ns = (row["timeout_ms"] or 0) * 1_000_000
        timed_out = bool(row["retired"]) or (timeout_ns and pending_ns >= timeout_ns)
        kind = model.ERROR_TIMEOUT if timed_out else model.ERROR_NOT_COMPLETED
        attributes.append(_kv(model.ERROR_TYPE, kind))
        status = Status(
            code=Status.STATUS_CODE_ERROR,
            message=f"{row['op']} never completed ({row['state']})",
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
        [_kv(key, value) for key, value in model.resource_attributes(job, rank, extra)]
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
        else [None] * table.num_rows  # run_id, in an archive written before runs had ids
        for name in _COLUMNS
    }
    rows = [
        dict(zip(_COLUMNS, values, strict=True)) for values in zip(*columns.values(), strict=True)
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
            resource_spans = _resource(row["job"], row["rank"], resource)
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
