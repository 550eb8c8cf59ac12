"""The analyzer's findings as spans, in the traces of the collectives they are about.

Each finding becomes one span named ``fr_otel.verdict`` in the trace of its collective
(the same deterministic trace id the ranks' spans have), so Jaeger and Tempo show the
diagnosis beside the evidence. Its resource is the analyzer (``service.instance.id``
``<job>/analyzer``); status ERROR, with the finding's summary as the message.
"""

from __future__ import annotations

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from fr_otel import __version__
from fr_otel.analysis.findings import Analysis, Finding
from fr_otel.otel import model
from fr_otel.otel.encode import key_value


def finding_trace_key(job: str, finding: Finding, run_id: str | None) -> bytes:
    """The key of the trace ``finding`` is about: its collective's, the one the ranks'
    spans of that collective are in (a lone send or recv's own, for ``p2p_unmatched``)."""
    group = finding.group
    left = finding.facts.left_waiting
    if finding.kind == "p2p_unmatched":
        # the waiting rank's send or recv: its own trace
        return model.trace_key(
            job=job,
            pg_name=group.name,
            pg_ranks=group.ranks,
            collective_seq_id=None,
            is_p2p=True,
            rank=left[0] if left is not None else -1,
            p2p_seq_id=left[1] if left is not None else None,
            run_id=run_id,
        )
    return model.collective_trace_key(
        job=job,
        pg_name=group.name,
        pg_ranks=group.ranks,
        collective_seq_id=finding.collective_seq_id,
        run_id=run_id,
    )


def finding_ids(
    job: str, finding: Finding, index: int, run_id: str | None = None
) -> tuple[bytes, bytes]:
    """(trace id, span id) of the verdict span of the ``index``-th finding."""
    key = finding_trace_key(job, finding, run_id)
    # ranks' span ids hash (key, rank >= 0, record id): -1 keeps these apart
    return model.trace_id(key), model.span_id(key, -1, index)


def verdict_spans(analysis: Analysis, run_id: str | None = None) -> ExportTraceServiceRequest:
    """One request holding a verdict span per finding (empty for a healthy job);
    ``run_id`` is the incident's rows' (their traces' ids include it)."""
    request = ExportTraceServiceRequest()
    if not analysis.findings:
        return request
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.extend(
        [
            key_value(model.SERVICE_NAME, analysis.job),
            key_value(model.SERVICE_INSTANCE_ID, f"{analysis.job}/{model.ANALYZER_INSTANCE}"),
            key_value(model.JOB, analysis.job),
        ]
    )
    scope = resource_spans.scope_spans.add()
    scope.scope.name = model.SCOPE_NAME
    scope.scope.version = __version__
    for index, finding in enumerate(analysis.findings):
        trace_id, span_id = finding_ids(analysis.job, finding, index, run_id)
        when = finding.time_ns or 0
        attributes = [
            key_value(model.FINDING_KIND, finding.kind),
            key_value(model.FINDING_CULPRIT_RANKS, list(finding.culprit_ranks)),
            key_value(model.FINDING_SUMMARY, finding.summary),
            key_value(model.FINDING_ROOT_CAUSE, index == analysis.root_cause),
            key_value(model.FINDING_INDEX, index),
            key_value(model.PG_NAME, finding.group.name),
            key_value(model.INCIDENT, analysis.incident),
        ]
        if finding.group.desc:
            attributes.append(key_value(model.PG_DESC, finding.group.desc))
        if finding.collective_seq_id is not None:
            attributes.append(key_value(model.COLLECTIVE_SEQ_ID, finding.collective_seq_id))
        if finding.op:
            attributes.append(key_value(model.OP, finding.op))
        if finding.consequence_of is not None:
            attributes.append(key_value(model.FINDING_CONSEQUENCE_OF, finding.consequence_of))
        scope.spans.append(
            Span(
                trace_id=trace_id,
                span_id=span_id,
                name=model.VERDICT_SPAN_NAME,
                kind=Span.SPAN_KIND_INTERNAL,
                start_time_unix_nano=when,
                end_time_unix_nano=when,
                attributes=attributes,
                status=Status(code=Status.STATUS_CODE_ERROR, message=finding.summary),
            )
        )
    return request
