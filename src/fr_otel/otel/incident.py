"""An incident as a signal: a log record (event ``fr_otel.incident``) and a count of
incidents (``fr_otel.incidents``), written with opentelemetry-proto like the spans and sent
on their path (``otel.signals``, ``otel.incident_delivery``).

Two moments make one ``IncidentEvent``:

- the recorder declaring an incident (``declared``), before any analysis: what it knows
  then, the job, run, incident id, its trigger and the rank that declared it. The kind is
  the trigger's name (``model.INCIDENT_TRIGGERS``); the resource is that rank's, as its
  spans'. The trace id is the one of the collective that failed, where the rank knows it;
- an analysis with findings (``analysed``: ``fr-otel analyze``, ``fr-otel export
  --findings``): the root cause's kind, culprit ranks, group, sequence number and call
  site, and the trace id of its collective, the one its verdict span (``otel.verdict``)
  and the ranks' spans of that collective have, so a logs view leads straight to the
  trace. The resource is the analyzer's (``<job>/analyzer``), as the verdict spans'. A
  verdict with only performance findings (a straggler: slow, not stuck) has no root cause:
  its first finding is said, as WARN rather than ERROR.

**The count.** ``fr_otel.incidents`` is a monotonic cumulative sum. Its data points carry
the job and the kind, a fixed small set of values (the analysis's finding kinds and the
recorder's triggers), and the incident id and the culprit ranks (as runs:
``otel.rankranges``) where known: an alert carries only the labels of the series it fires
on, and it must say which incident and whom (``deploy/prometheus/rules.yaml``).
Incidents are rare, and the Collector's Prometheus exporter forgets a series it has not
heard of for five minutes, so a series per incident costs nothing.

Each emitter (a rank's recorder, one ``fr-otel`` command: the resource) counts for itself
(``IncidentCounter``): a data point is how many times this emitter counted those
attributes, from the emitter's start (its start time) to now. In practice every point is 1:
a process emits once per incident, and there is nobody to keep a count across processes.
What Prometheus can read of that: the Collector's ``prometheus`` exporter serves the start
as the counter's created timestamp (protobuf exposition), so Prometheus with created
timestamp zero ingestion ingests a 0 there and ``increase()``/``changes()`` see even a new
series rise; without it a new series appears at 1, and rules count it from zero (``x - (x
offset 10m or x * 0)``). An emitter that counts the same attributes again moves its series
up, which ``increase()`` sees either way.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, SeverityNumber
from opentelemetry.proto.metrics.v1.metrics_pb2 import NumberDataPoint
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from fr_otel import __version__
from fr_otel.otel import model
from fr_otel.otel.encode import key_value
from fr_otel.otel.metric import cumulative_count
from fr_otel.otel.rankranges import to_ranges
from fr_otel.stacks import is_library_frame

if TYPE_CHECKING:
    from fr_otel.analysis.findings import Analysis, Finding

CULPRIT_LABEL_MAX = 64
"""The longest culprit ranks text a data point carries (a label): past it, the runs that
fit and ``...``. The log record carries every culprit."""


@dataclass(frozen=True, kw_only=True)
class CallSite:
    """Where the user's code issued the collective (``code.*`` semantic conventions)."""

    file: str | None = None
    line: int | None = None
    function: str | None = None


@dataclass(frozen=True, kw_only=True)
class IncidentEvent:
    """What one incident's log record and count say (see the module's docstring)."""

    job: str
    incident: str
    kind: str
    """The root finding's kind, or the recorder's trigger."""
    summary: str
    """The log record's body."""
    time_ns: int
    """When it happened: the declaration, or the divergence the analysis found."""
    resource: tuple[tuple[str, str | int], ...]
    """The emitter: a rank's resource, or the analyzer's."""
    run_id: str | None = None
    error: bool = True
    """ERROR; False for WARN (a verdict of performance findings only)."""
    trigger: str | None = None
    rank: int | None = None
    """The rank that declared the incident."""
    culprit_ranks: tuple[int, ...] = ()
    group: str | None = None
    group_desc: str | None = None
    collective_seq_id: int | None = None
    op: str | None = None
    call_site: CallSite | None = None
    trace_id: bytes = b""
    span_id: bytes = b""
    """The verdict span's, when it is sent too."""


def emitter_resource(job: str, instance: str) -> tuple[tuple[str, str | int], ...]:
    """The resource of an emitter that is no rank: ``<job>/<instance>``."""
    return (
        (model.SERVICE_NAME, job),
        (model.SERVICE_INSTANCE_ID, f"{job}/{instance}"),
        (model.JOB, job),
    )


def trigger_kind(trigger: str) -> str:
    """The kind the recorder's ``trigger`` counts as (one of a fixed set)."""
    return trigger if trigger in model.INCIDENT_TRIGGERS else model.OTHER_TRIGGER


def declared(
    *,
    job: str,
    incident: str,
    trigger: str,
    rank: int | None,
    resource: Sequence[tuple[str, str | int]],
    run_id: str | None = None,
    time_ns: int | None = None,
    trace_id: bytes = b"",
) -> IncidentEvent:
    """The recorder's declaration of ``incident`` (see the module's docstring)."""
    who = f"rank {rank}" if rank is not None else "the recorder"
    return IncidentEvent(
        job=job,
        incident=incident,
        kind=trigger_kind(trigger),
        summary=f"incident {incident} of job {job}: declared by {who} ({trigger})",
        time_ns=time.time_ns() if time_ns is None else time_ns,
        resource=tuple(resource),
        run_id=run_id,
        trigger=trigger,
        rank=rank,
        trace_id=trace_id,
    )


def analysed(
    analysis: Analysis, *, run_id: str | None = None, verdict_sent: bool = False
) -> IncidentEvent | None:
    """The verdict of ``analysis`` (None for a healthy one). ``run_id`` is the incident's
    rows' (their traces' ids include it); with ``verdict_sent``, the verdict spans go out
    too and the log record names its root's span."""
    from fr_otel.otel.verdict import finding_ids

    if not analysis.findings:
        return None
    index = analysis.root_cause if analysis.root_cause is not None else 0
    root = analysis.findings[index]
    trace_id, span_id = finding_ids(analysis.job, root, index, run_id)
    return IncidentEvent(
        job=analysis.job,
        incident=analysis.incident,
        kind=root.kind,
        summary=root.summary,
        time_ns=root.time_ns or time.time_ns(),
        resource=emitter_resource(analysis.job, model.ANALYZER_INSTANCE),
        run_id=run_id,
        error=analysis.root_cause is not None,
        culprit_ranks=tuple(sorted(root.culprit_ranks)),
        group=root.group.name,
        group_desc=root.group.desc,
        collective_seq_id=root.collective_seq_id,
        op=root.op,
        call_site=call_site(root),
        trace_id=trace_id,
        span_id=span_id if verdict_sent else b"",
    )


def call_site(finding: Finding) -> CallSite | None:
    """The first culprit's call site, else the majority's (the user's innermost frame)."""
    stacks = [frames for _, frames in finding.culprit_stacks()]
    stacks.append(finding.stack(finding.stacks.majority))
    for frames in stacks:
        for frame in frames:
            if not is_library_frame(frame):
                line = frame.get("line")
                return CallSite(
                    file=frame.get("filename"),
                    line=int(line) if isinstance(line, int) else None,
                    function=frame.get("name"),
                )
    return None


def _resource(event: IncidentEvent) -> Resource:
    return Resource(attributes=[key_value(k, v) for k, v in event.resource])


def _scope() -> InstrumentationScope:
    return InstrumentationScope(name=model.SCOPE_NAME, version=__version__)


def log_attributes(event: IncidentEvent) -> list[KeyValue]:
    """What the log record says besides its body: who, what, where."""
    out = [
        key_value(model.JOB, event.job),
        key_value(model.INCIDENT, event.incident),
        key_value(model.FINDING_KIND, event.kind),
        key_value(model.FINDING_SUMMARY, event.summary),
    ]
    optional: list[tuple[str, object]] = [
        (model.RUN_ID, event.run_id),
        (model.INCIDENT_TRIGGER, event.trigger),
        (model.RANK, event.rank),
        (model.PG_NAME, event.group),
        (model.PG_DESC, event.group_desc),
        (model.COLLECTIVE_SEQ_ID, event.collective_seq_id),
        (model.OP, event.op),
    ]
    if event.culprit_ranks:
        optional.append((model.FINDING_CULPRIT_RANKS, list(event.culprit_ranks)))
    site = event.call_site
    if site is not None:
        optional += [
            (model.CODE_FILE, site.file),
            (model.CODE_LINE, site.line),
            (model.CODE_FUNCTION, site.function),
        ]
    out += [key_value(key, value) for key, value in optional if value is not None]
    return out


def incident_logs(event: IncidentEvent) -> ExportLogsServiceRequest:
    """One request holding the incident's log record."""
    record = LogRecord(
        time_unix_nano=event.time_ns,
        observed_time_unix_nano=time.time_ns(),
        severity_number=(
            SeverityNumber.SEVERITY_NUMBER_ERROR
            if event.error
            else SeverityNumber.SEVERITY_NUMBER_WARN
        ),
        severity_text="ERROR" if event.error else "WARN",
        body=AnyValue(string_value=event.summary),
        attributes=log_attributes(event),
        trace_id=event.trace_id,
        span_id=event.span_id,
        flags=0x01 if event.trace_id else 0,  # sampled: the trace's spans are sent
        event_name=model.INCIDENT_EVENT,
    )
    request = ExportLogsServiceRequest()
    resource_logs = request.resource_logs.add(resource=_resource(event))
    resource_logs.scope_logs.add(scope=_scope(), log_records=[record])
    return request


def culprits_label(ranks: Sequence[int]) -> str:
    """``ranks`` as runs (``3``, ``0-7``, ``1,5``), cut to ``CULPRIT_LABEL_MAX``."""
    text = to_ranges(sorted(set(ranks)))
    if len(text) <= CULPRIT_LABEL_MAX:
        return text
    cut = text.rfind(",", 0, CULPRIT_LABEL_MAX - 3)
    return text[:cut] + ",..." if cut > 0 else text[: CULPRIT_LABEL_MAX - 3] + "..."


def point_attributes(event: IncidentEvent) -> list[KeyValue]:
    """The count's data point attributes (Prometheus labels, see the module's docstring)."""
    out = [
        key_value(model.JOB, event.job),
        key_value(model.FINDING_KIND, event.kind),
        key_value(model.INCIDENT, event.incident),
    ]
    if event.culprit_ranks:
        out.append(key_value(model.FINDING_CULPRIT_RANKS, culprits_label(event.culprit_ranks)))
    return out


@dataclass
class IncidentCounter:
    """One emitter's count of incidents, from ``start_ns`` (see the module's docstring)."""

    start_ns: int = field(default_factory=time.time_ns)
    _counts: dict[tuple[tuple[str, str], ...], int] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, event: IncidentEvent) -> ExportMetricsServiceRequest:
        """Count ``event``; one request holding its series' point as of now."""
        attributes = point_attributes(event)
        key = tuple((a.key, a.value.string_value) for a in attributes)
        with self._lock:
            value = self._counts[key] = self._counts.get(key, 0) + 1
        point = NumberDataPoint(
            start_time_unix_nano=self.start_ns,
            time_unix_nano=max(time.time_ns(), self.start_ns + 1),
            as_int=value,
            attributes=attributes,
        )
        metric = cumulative_count(
            name=model.INCIDENTS_METRIC,
            description="Incidents the recorder declared or an analysis found, by job and kind",
            unit="{incident}",
            point=point,
        )
        request = ExportMetricsServiceRequest()
        resource_metrics = request.resource_metrics.add(resource=_resource(event))
        resource_metrics.scope_metrics.add(scope=_scope(), metrics=[metric])
        return request
