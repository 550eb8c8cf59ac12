"""The live check's findings as OTLP: a span with an event in the trace of the collective
they are about, and a log record pointing at that span.

A desync's verdict (``live.verdict.Verdict``) goes into the trace of the collective where
the ranks diverged; a stall's suspect (``live.suspect.StallSuspect``) into the trace of the
collective the waiting members are in. The trace id is the one the ranks' own spans of
that collective have (``model.trace_key`` with the job, run id, group and sequence number,
as ``encode`` builds it from their rows), so Jaeger and Tempo show the finding beside the
evidence, and the log record's trace and span ids lead from a logs view to it.

The span runs from the evidence (the divergence; the first waiting member's collective) to
the finding; its event, at the finding, carries the culprit as attributes, as does the log
record (severity ERROR for a desync, WARN for a stall suspect: a stall is not proof). Both
have the live check as their resource (``service.instance.id`` ``<job>/live/<host>``).
Ids are derived from the finding, so a request sent twice is the same span twice.

The live check's blindness (ranks whose rings it cannot read) is a metric with the same
resource (``blind_metrics``): a gauge of how many ranks it cannot read now, naming them,
and a monotonic sum of the times ranks became unreadable.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import TypeAlias

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, SeverityNumber
from opentelemetry.proto.metrics.v1.metrics_pb2 import Gauge, Metric, NumberDataPoint
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from fr_otel import __version__
from fr_otel.live.suspect import StallSuspect
from fr_otel.live.verdict import Verdict
from fr_otel.otel import model
from fr_otel.otel.encode import key_value
from fr_otel.otel.metric import cumulative_count

LiveFinding: TypeAlias = "Verdict | StallSuspect"


def trace_key(found: LiveFinding) -> bytes:
    """The key of the trace the ranks' spans of the finding's collective are in."""
    return model.collective_trace_key(
        job=found.job,
        pg_name=found.group,
        pg_ranks=found.group_ranks,
        collective_seq_id=found.seq,
        run_id=found.run_id,
    )


def ids(found: LiveFinding) -> tuple[bytes, bytes]:
    """(trace id, span id) of the finding's span."""
    key = trace_key(found)
    # a desync and a stall of the same collective are two spans
    index = 1 if isinstance(found, StallSuspect) else 0
    return model.trace_id(key), model.span_id(key, model.LIVE_RANK, index)


def _resource(job: str, host: str) -> Resource:
    """The live check of ``job`` on ``host``."""
    return Resource(
        attributes=[
            key_value(model.SERVICE_NAME, job),
            key_value(model.SERVICE_INSTANCE_ID, f"{job}/{model.LIVE_INSTANCE}/{host}"),
            key_value(model.JOB, job),
            key_value(model.HOST_NAME, host),
        ]
    )


def _scope() -> InstrumentationScope:
    return InstrumentationScope(name=model.SCOPE_NAME, version=__version__)


def attributes(found: LiveFinding) -> list[KeyValue]:
    """What the event and the log record say: the culprit, where, and how long."""
    out = [
        key_value(model.FINDING_KIND, found.kind),
        key_value(model.FINDING_CULPRIT_RANKS, list(found.culprit_ranks)),
        key_value(model.PG_NAME, found.group),
        key_value(model.LIVE_SECONDS, round(found.seconds, 3)),
        key_value(model.LIVE_ID, found.id),
    ]
    if found.group_desc:
        out.append(key_value(model.PG_DESC, found.group_desc))
    if found.seq is not None:
        out.append(key_value(model.COLLECTIVE_SEQ_ID, found.seq))
    if found.op:
        out.append(key_value(model.OP, found.op))
    if found.call_site:
        out.append(key_value(model.LIVE_CALL_SITE, found.call_site))
    if isinstance(found, Verdict):
        out.append(key_value(model.FINDING_SUMMARY, found.summary))
    else:
        out.append(key_value(model.LIVE_WAITING_RANKS, list(found.waiting_ranks)))
        out.append(key_value(model.LIVE_WAITED_S, found.waited_s))
    if found.incident:
        out.append(key_value(model.INCIDENT, found.incident))
    if found.run_id:
        out.append(key_value(model.RUN_ID, found.run_id))
    return out


def live_spans(found: LiveFinding) -> ExportTraceServiceRequest:
    """One request holding the finding's span, with its event."""
    trace_id, span_id = ids(found)
    desync = isinstance(found, Verdict)
    began = found.divergence_ns if isinstance(found, Verdict) else found.since_ns
    facts = attributes(found)
    span = Span(
        trace_id=trace_id,
        span_id=span_id,
        name=model.LIVE_VERDICT_SPAN_NAME if desync else model.LIVE_STALL_SPAN_NAME,
        kind=Span.SPAN_KIND_INTERNAL,
        start_time_unix_nano=min(began, found.known_ns),
        end_time_unix_nano=found.known_ns,
        attributes=facts,
        events=[
            Span.Event(
                time_unix_nano=found.known_ns,
                name=model.LIVE_DESYNC_EVENT if desync else model.LIVE_STALL_EVENT,
                attributes=facts,
            )
        ],
        # a desync is proven; a stall suspect may yet catch up
        status=Status(code=Status.STATUS_CODE_ERROR, message=found.line())
        if desync
        else Status(message=found.line()),
    )
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add(resource=_resource(found.job, found.host))
    resource_spans.scope_spans.add(scope=_scope(), spans=[span])
    return request


def live_logs(found: LiveFinding) -> ExportLogsServiceRequest:
    """One request holding the finding's log record, pointing at its span."""
    trace_id, span_id = ids(found)
    desync = isinstance(found, Verdict)
    record = LogRecord(
        time_unix_nano=found.known_ns,
        observed_time_unix_nano=time.time_ns(),
        severity_number=(
            SeverityNumber.SEVERITY_NUMBER_ERROR if desync else SeverityNumber.SEVERITY_NUMBER_WARN
        ),
        severity_text="ERROR" if desync else "WARN",
        body=AnyValue(string_value=found.line()),
        attributes=attributes(found),
        trace_id=trace_id,
        span_id=span_id,
        flags=0x01,  # sampled: the span is sent too
        event_name=model.LIVE_DESYNC_EVENT if desync else model.LIVE_STALL_EVENT,
    )
    request = ExportLogsServiceRequest()
    resource_logs = request.resource_logs.add(resource=_resource(found.job, found.host))
    resource_logs.scope_logs.add(scope=_scope(), log_records=[record])
    return request


def blind_metrics(
    *,
    job: str,
    run_id: str | None,
    host: str,
    blind: Collection[int],
    episodes: int,
    since_ns: int,
    now_ns: int,
) -> ExportMetricsServiceRequest:
    """The live check's blindness as of ``now_ns``: ``fr_otel.live.blind_ranks``, how many
    ranks of ``host`` it cannot read (``blind``, named in ``fr_otel.live.ranks``), and
    ``fr_otel.live.blind_episodes``, how many times ranks became unreadable since
    ``since_ns`` (the check's start). The job, run id and host are data point attributes
    too: the resource's host is dropped on its way to Prometheus by Collectors that keep
    one series per job (collector-config/), and the gauge is per host."""
    points = [
        key_value(model.JOB, job),
        key_value(model.HOST_NAME, host),
        key_value(model.LIVE_RANKS, [str(rank) for rank in sorted(blind)]),
    ]
    if run_id:
        points.append(key_value(model.RUN_ID, run_id))
    gauge = Metric(
        name=model.LIVE_BLIND_RANKS_METRIC,
        description="Ranks of this host whose rings the live check cannot read",
        unit="{rank}",
        gauge=Gauge(
            data_points=[
                NumberDataPoint(time_unix_nano=now_ns, as_int=len(blind), attributes=points)
            ]
        ),
    )
    episodes_sum = cumulative_count(
        name=model.LIVE_BLIND_EPISODES_METRIC,
        description="Times ranks of this host became unreadable to the live check",
        unit="{episode}",
        point=NumberDataPoint(
            start_time_unix_nano=since_ns,
            time_unix_nano=now_ns,
            as_int=episodes,
            attributes=[a for a in points if a.key != model.LIVE_RANKS],
        ),
    )
    request = ExportMetricsServiceRequest()
    resource_metrics = request.resource_metrics.add(resource=_resource(job, host))
    resource_metrics.scope_metrics.add(scope=_scope(), metrics=[gauge, episodes_sum])
    return request
