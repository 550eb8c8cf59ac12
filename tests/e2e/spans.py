"""What should arrive, from the archive, and what did, from Jaeger and the Collectors' file
archives: compared span by span, by the ids fr_otel derives (trace id from the job, the
group and the sequence number; span id from those, the rank and the record id)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from fr_otel.analysis.findings import Analysis
from fr_otel.analysis.source import pick_incident, register_archive
from fr_otel.otel import model
from fr_otel.otel.encode import encode_requests
from tests.e2e.stack import Jaeger, span_rank, tags, wait_until


@dataclass(frozen=True)
class Expected:
    """One archive row as the span the exporter and the recorder make of it."""

    trace_id: str
    span_id: str
    rank: int
    pg_name: str
    collective_seq_id: int | None
    error: bool


def archive_spans(archive: Path, job: str, incident: str) -> dict[str, Expected]:
    """span id (hex) -> what that span must be, for every row of the incident."""
    chosen = pick_incident(archive, job, incident)
    with duckdb.connect() as connection:
        register_archive(connection, archive, only=chosen)
        table = connection.sql("SELECT * FROM src").to_arrow_table()
    out: dict[str, Expected] = {}
    for request in encode_requests(table):
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value for a in resource_spans.resource.attributes}
            rank = resource[model.RANK].int_value
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attributes = {a.key: a.value for a in span.attributes}
                    seq = attributes.get(model.COLLECTIVE_SEQ_ID)
                    out[span.span_id.hex()] = Expected(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        rank=rank,
                        pg_name=attributes[model.PG_NAME].string_value,
                        collective_seq_id=None if seq is None else seq.int_value,
                        error=span.status.code == span.status.STATUS_CODE_ERROR,
                    )
    return out


def root_cause_trace_id(analysis: Analysis, expected: dict[str, Expected]) -> str:
    """The trace that holds the ranks' spans of the root cause's collective: where its
    verdict span must go."""
    assert analysis.root_cause is not None, analysis.findings
    finding = analysis.findings[analysis.root_cause]
    [trace_id] = {
        span.trace_id
        for span in expected.values()
        if span.pg_name == finding.group.name
        and span.collective_seq_id == finding.collective_seq_id
    }
    return trace_id


def jaeger_spans(
    jaeger: Jaeger, service: str, raw: bool = True
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Every span Jaeger holds for ``service`` as (trace, span) pairs. ``raw``: a span stored
    twice is listed twice; else as the UI shows them."""
    traces = jaeger.find_traces(service, raw=raw)
    return [(trace, span) for trace in traces for span in trace["spans"]]


def wait_for_jaeger(
    jaeger: Jaeger, service: str, span_ids: Iterable[str], *, timeout_s: float, interval_s: float
) -> None:
    """Until Jaeger holds every one of ``span_ids`` (hex) for ``service``."""
    wanted = set(span_ids)
    wait_until(
        f"Jaeger to hold the {len(wanted)} spans",
        lambda: {s["spanID"] for _, s in jaeger_spans(jaeger, service)} >= wanted,
        timeout_s=timeout_s,
        interval_s=interval_s,
    )


def jaeger_span_count(jaeger: Jaeger, service: str) -> int:
    try:
        return len(jaeger_spans(jaeger, service))
    except OSError:
        return 0


def is_error(span: dict[str, Any]) -> bool:
    return tags(span).get("otel.status_code") == "ERROR"


def ranks_by_trace(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Counter[int]]:
    out: dict[str, Counter[int]] = {}
    for trace, span in pairs:
        rank = span_rank(trace, span)
        if rank is not None:
            out.setdefault(span["traceID"], Counter())[rank] += 1
    return out


def file_archive_spans(folder: Path) -> list[tuple[str, str]]:
    """(trace id, span id) of every span in a Collector's OTLP JSON lines archive
    (``spans*.jsonl``: the file exporter's live file and its rotated ones), as written: a
    span written twice is listed twice."""
    found: list[tuple[str, str]] = []
    for path in sorted(folder.glob("spans*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:  # a line being written
                continue
            for resource_spans in data.get("resourceSpans") or []:
                for scope in resource_spans.get("scopeSpans") or []:
                    for span in scope.get("spans") or []:
                        found.append((span["traceId"].lower(), span["spanId"].lower()))
    return found
