"""An incident as a signal (``fr_otel.otel.incident``): the log record's and the count's
proto fields, the log record in the very trace of the verdict span, and both spooled while
the Collector is down and delivered once it is back (a real OTLP receiver, both protocols).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.logs.v1.logs_pb2 import SeverityNumber
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality

from fr_otel import config
from fr_otel.analysis import Analysis, analyze
from fr_otel.archive import import_dumps
from fr_otel.otel import model
from fr_otel.otel.incident import (
    CULPRIT_LABEL_MAX,
    IncidentCounter,
    analysed,
    culprits_label,
    declared,
    incident_logs,
)
from fr_otel.otel.incident_delivery import send_incident
from fr_otel.otel.rankranges import from_ranges
from fr_otel.otel.signals import LogsRequest, MetricsRequest, Signal, signal_url
from fr_otel.otel.split import split_request
from fr_otel.otel.spool import resend, spool, spooled
from fr_otel.otel.transport import exporter_for
from fr_otel.otel.verdict import verdict_spans
from fr_otel.sim import FleetSpec, simulate, write_fleet
from tests.otlp_receiver import OtlpReceiver, _any_value

ROOT = Path(__file__).resolve().parents[2]
STRAGGLERS = ROOT / "tests" / "data" / "stragglers_one" / "archive"


def _attributes(items: Any) -> dict[str, Any]:
    return {a.key: _any_value(a.value) for a in items}


@pytest.fixture(scope="module")
def skipped(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    """A simulated 8-rank fleet whose rank 3 skipped a collective."""
    root = tmp_path_factory.mktemp("skipped")
    spec = FleetSpec(world=8, entries=60, fault="skipped_collective", fault_rank=3)
    write_fleet(simulate(spec), root / "dumps")
    assert import_dumps([root / "dumps"], archive=root / "archive", job="j", incident="i").ok
    return analyze(root / "archive")


def test_the_verdicts_log_record_is_in_its_verdict_spans_trace(skipped: Analysis) -> None:
    assert skipped.root_cause is not None
    root = skipped.findings[skipped.root_cause]
    event = analysed(skipped, run_id="run-7", verdict_sent=True)
    assert event is not None
    [resource_logs] = incident_logs(event).resource_logs
    [scope] = resource_logs.scope_logs
    [record] = scope.log_records
    assert record.event_name == model.INCIDENT_EVENT == "fr_otel.incident"
    assert record.severity_number == SeverityNumber.SEVERITY_NUMBER_ERROR
    assert record.severity_text == "ERROR"
    assert record.body.string_value == root.summary
    assert record.time_unix_nano == root.time_ns
    assert record.observed_time_unix_nano >= time.time_ns() - 60 * 10**9
    # the verdict span of the root cause, as export --findings sends it with the same run id
    verdicts = verdict_spans(skipped, run_id="run-7")
    [verdict] = [
        s
        for rs in verdicts.resource_spans
        for sc in rs.scope_spans
        for s in sc.spans
        if _attributes(s.attributes)[model.FINDING_ROOT_CAUSE]
    ]
    assert (record.trace_id, record.span_id) == (verdict.trace_id, verdict.span_id)
    assert len(record.trace_id) == 16 and record.flags == 1
    # without the run id the trace is another one: the ranks' spans of a recorded run
    # carry theirs, and the log record must lead to those
    other = analysed(skipped, run_id=None)
    assert other is not None and other.trace_id != record.trace_id and other.span_id == b""
    facts = _attributes(record.attributes)
    assert facts == {
        model.JOB: "j",
        model.INCIDENT: "i",
        model.FINDING_KIND: "skipped_collective",
        model.FINDING_SUMMARY: root.summary,
        model.RUN_ID: "run-7",
        model.FINDING_CULPRIT_RANKS: [3],
        model.PG_NAME: root.group.name,
        model.PG_DESC: root.group.desc,
        model.COLLECTIVE_SEQ_ID: root.collective_seq_id,
        model.OP: root.op,
        # the simulator's stacks: the culprit's innermost frame of the user's code
        model.CODE_FILE: "/workspace/optim/grad_sync.py",
        model.CODE_LINE: 33,
        model.CODE_FUNCTION: "reduce_scatter_grads",
    }
    assert _attributes(resource_logs.resource.attributes) == {
        model.SERVICE_NAME: "j",
        model.SERVICE_INSTANCE_ID: "j/analyzer",
        model.JOB: "j",
    }


def test_the_count_is_a_monotonic_cumulative_sum_per_emitter(skipped: Analysis) -> None:
    event = analysed(skipped)
    assert event is not None
    counter = IncidentCounter()
    started = time.time_ns()
    first, second = counter.count(event), counter.count(event)
    points = []
    for request in (first, second):
        [resource_metrics] = request.resource_metrics
        [scope] = resource_metrics.scope_metrics
        [metric] = scope.metrics
        assert metric.name == model.INCIDENTS_METRIC == "fr_otel.incidents"
        assert metric.unit == "{incident}"
        assert metric.WhichOneof("data") == "sum"
        assert metric.sum.is_monotonic
        assert (
            metric.sum.aggregation_temporality
            == AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
        )
        [point] = metric.sum.data_points
        points.append(point)
        assert _attributes(point.attributes) == {
            model.JOB: "j",
            model.FINDING_KIND: "skipped_collective",
            model.INCIDENT: "i",
            model.FINDING_CULPRIT_RANKS: "3",
        }
    # counted from the emitter's start, up by one each time: what increase() sees
    assert [p.as_int for p in points] == [1, 2]
    assert points[0].start_time_unix_nano == points[1].start_time_unix_nano == counter.start_ns
    assert counter.start_ns <= started < points[0].time_unix_nano <= points[1].time_unix_nano
    # another emitter (another process) counts for itself
    assert (
        IncidentCounter()
        .count(event)
        .resource_metrics[0]
        .scope_metrics[0]
        .metrics[0]
        .sum.data_points[0]
        .as_int
        == 1
    )


def test_a_verdict_of_performance_findings_only_is_a_warning() -> None:
    analysis = analyze(STRAGGLERS)
    assert analysis.findings and analysis.root_cause is None
    event = analysed(analysis)
    assert event is not None and event.kind == "straggler" and not event.error
    record = incident_logs(event).resource_logs[0].scope_logs[0].log_records[0]
    assert record.severity_number == SeverityNumber.SEVERITY_NUMBER_WARN
    assert record.severity_text == "WARN"


def test_the_recorders_declaration_says_what_it_knows() -> None:
    resource = model.resource_attributes("train", 2, {model.HOST_NAME: "node-1"})
    event = declared(
        job="train",
        incident="20260101T000000Z-r2-timeout",
        trigger="timeout",
        rank=2,
        resource=resource,
        run_id="r-1",
    )
    [resource_logs] = incident_logs(event).resource_logs
    record = resource_logs.scope_logs[0].log_records[0]
    assert record.event_name == model.INCIDENT_EVENT
    assert record.severity_number == SeverityNumber.SEVERITY_NUMBER_ERROR
    assert record.trace_id == b"" and record.flags == 0
    assert "declared by rank 2 (timeout)" in record.body.string_value
    assert _attributes(record.attributes) == {
        model.JOB: "train",
        model.INCIDENT: "20260101T000000Z-r2-timeout",
        model.FINDING_KIND: "timeout",
        model.FINDING_SUMMARY: record.body.string_value,
        model.RUN_ID: "r-1",
        model.INCIDENT_TRIGGER: "timeout",
        model.RANK: 2,
    }
    # the rank's own resource, as its spans have it
    assert _attributes(resource_logs.resource.attributes) == dict(resource)
    point = IncidentCounter().count(event).resource_metrics[0].scope_metrics[0].metrics[0]
    assert _attributes(point.sum.data_points[0].attributes) == {
        model.JOB: "train",
        model.FINDING_KIND: "timeout",
        model.INCIDENT: "20260101T000000Z-r2-timeout",
    }
    # a trigger nobody listed is counted as "other": the kind's values stay a fixed set
    odd = declared(job="t", incident="x", trigger="cosmic_ray", rank=0, resource=())
    assert odd.kind == model.OTHER_TRIGGER and odd.trigger == "cosmic_ray"


def test_every_trigger_the_recorder_names_is_a_known_kind() -> None:
    """The recorder's triggers are literals in its code: each is one of the fixed set."""
    recorder = ROOT / "src" / "fr_otel" / "recorder"
    named = set(re.findall(r'return "(\w+)"', (recorder / "triggers.py").read_text()))
    named |= set(re.findall(r'return "(\w+)"', (recorder / "frsource.py").read_text()))
    named |= set(re.findall(r'_flush_job\("(\w+)"', (recorder / "recorder.py").read_text()))
    named |= set(
        re.findall(r'new_incident_id\("launcher", "(\w+)"', (recorder / "launcher.py").read_text())
    )
    assert {"timeout", "collective_error", "job_failed", "operator"} <= named
    assert named <= set(model.INCIDENT_TRIGGERS), named - set(model.INCIDENT_TRIGGERS)


def test_every_incident_attribute_is_in_the_model_and_the_doc(skipped: Analysis) -> None:
    doc = (ROOT / "docs" / "span-model.md").read_text()
    assert [a for a in model.INCIDENT_ATTRIBUTES if f"`{a}`" not in doc] == []
    verdict = analysed(skipped, run_id="r")
    declaration = declared(
        job="j", incident="i", trigger="timeout", rank=1, resource=(), run_id="r"
    )
    assert verdict is not None
    used = {
        a.key
        for event in (verdict, declaration)
        for a in incident_logs(event).resource_logs[0].scope_logs[0].log_records[0].attributes
    }
    assert used == set(model.INCIDENT_ATTRIBUTES)


def test_culprit_labels_are_short_runs() -> None:
    assert culprits_label([5, 1]) == "1,5"
    assert culprits_label(range(8)) == "0-7"
    scattered = [n * n for n in range(1, 200)]
    label = culprits_label(scattered)
    assert len(label) <= CULPRIT_LABEL_MAX and label.endswith(",...")
    assert from_ranges(label.removesuffix(",...")) == scattered[: label.count(",")]


def test_signal_urls_and_requests() -> None:
    assert signal_url("http://c:4318/v1/traces", Signal.LOGS) == "http://c:4318/v1/logs"
    assert signal_url("http://c:4318/p/v1/traces/", Signal.METRICS) == "http://c:4318/p/v1/metrics"
    assert signal_url("http://c:4318/custom", Signal.LOGS) is None
    # a logs or metrics request holds no spans and is never split
    assert split_request(LogsRequest(b"\x0a\x00\x0a\x00")) is None
    assert MetricsRequest(b"").span_count == 0


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_collector_down_spooled_then_up_delivered(
    protocol: str, skipped: Analysis, tmp_path: Path
) -> None:
    event = analysed(skipped)
    assert event is not None
    receiver = OtlpReceiver(protocol=protocol).start()
    receiver.stop()  # the Collector is down
    settings = config.otlp_settings(
        receiver.endpoint,
        config.PROTOCOL_GRPC if protocol == "grpc" else config.PROTOCOL_HTTP,
        environ={},
    )
    assert settings is not None
    spool_dir = tmp_path / "spool"
    started = time.monotonic()
    result = send_incident(
        event, IncidentCounter(), settings, deadline=time.monotonic() + 1.0, spool_dir=spool_dir
    )
    assert time.monotonic() - started < 5
    assert result.spooled == [Signal.LOGS, Signal.METRICS] and not result.sent, result.words()
    assert "spooled" in result.words()
    # each in its signal's folder; the spans' spool holds none of them
    assert spooled(spool_dir) == []
    [logs_file] = spooled(spool_dir / "logs")
    [metrics_file] = spooled(spool_dir / "metrics")
    # the same request again while the first waits: not spooled twice
    assert spool([LogsRequest(logs_file.read_bytes())], spool_dir) == []

    with receiver.start():  # the Collector is back
        for signal in (Signal.LOGS, Signal.METRICS):
            exporter = exporter_for(settings, signal)
            report = resend(spool_dir, exporter, 10.0, signal)
            exporter.shutdown()
            assert report.ok and report.sent_requests == 1, report.reasons
        # spans first, as the CLI does: the traces' resend leaves the other folders alone
        assert resend(spool_dir, exporter_for(settings), 5.0).attempts == 0
        [(resource, record)] = receiver.wait_for_logs(1)
        [(_, metric)] = receiver.wait_for_metrics(1)
    assert not logs_file.exists() and not metrics_file.exists()
    assert record.event_name == model.INCIDENT_EVENT
    assert record.trace_id == event.trace_id
    assert _attributes(record.attributes)[model.FINDING_KIND] == "skipped_collective"
    assert resource[model.SERVICE_INSTANCE_ID] == "j/analyzer"
    assert metric.name == model.INCIDENTS_METRIC and metric.sum.data_points[0].as_int == 1
