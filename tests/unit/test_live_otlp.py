"""The live check's findings reach a real OTLP receiver (gRPC and HTTP) as a span with an
event in the trace of their collective (the trace the ranks' spans of that collective are
in, as the real encoder builds them) and as a log record pointing at that span; a
Collector that is down costs nothing but one notice."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from opentelemetry.proto.logs.v1.logs_pb2 import SeverityNumber
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from fr_otel.config import otlp_settings
from fr_otel.live.otlp import live_spans
from fr_otel.live.send import SEND_DEADLINE_S, send_in_background
from fr_otel.live.suspect import StallSuspect
from fr_otel.live.verdict import Verdict
from fr_otel.otel import model
from fr_otel.otel.encode import row_to_span
from fr_otel.otel.signals import Signal, signal_url
from tests.otlp_receiver import OtlpReceiver, _any_value
from tests.rows import canonical_row

KNOWN_NS = 1_800_000_000_000_000_000
RUN = "20260101T000000Z-abc"


def _verdict(**over: Any) -> Verdict:
    values: dict[str, Any] = dict(
        id="v1",
        kind="reordered_collectives",
        culprit_ranks=[1],
        group="0",
        group_desc="default_pg",
        seq=21,
        op="all_reduce",
        call_site="/job/train.py:44 in parameters",
        summary="rank 1 issued all_gather where its peers issued all_reduce",
        divergence_ns=KNOWN_NS - 1_500_000_000,
        known_ns=KNOWN_NS,
        analysis_s=0.4,
        running_ranks=[0, 1, 2],
        job="train",
        run_id=RUN,
        host="node-7",
        policy="report",
        incident="inc-1",
        group_ranks=[0, 1, 2],
    )
    return Verdict(**{**values, **over})


def _suspect() -> StallSuspect:
    return StallSuspect(
        id="s1",
        kind="stall",
        culprit_ranks=[2],
        waiting_ranks=[0, 1],
        group="0",
        group_desc="default_pg",
        seq=9,
        op="all_reduce",
        waiting_site="/job/train.py:30 in step",
        call_site="/job/_common.py:88 in hang",
        in_collective=False,
        waited_s=4.2,
        threshold_s=4.0,
        since_ns=KNOWN_NS - 4_500_000_000,
        known_ns=KNOWN_NS,
        job="train",
        run_id=RUN,
        host="node-7",
        stacks={},
        group_ranks=[0, 1, 2],
    )


def _ranks_trace_id(found: Verdict | StallSuspect) -> bytes:
    """The trace id the real encoder gives a rank's span of the finding's collective."""
    row = canonical_row(
        job=found.job,
        run_id=found.run_id,
        pg_name=found.group,
        pg_desc=found.group_desc,
        pg_ranks=[0, 1, 2],
        collective_seq_id=found.seq,
        rank=1,
        backend="gloo",
    )
    trace_id: bytes = row_to_span(row).trace_id
    return trace_id


def _send(found: Verdict | StallSuspect, endpoint: str, protocol: str) -> list[tuple[str, str]]:
    said: list[tuple[str, str]] = []
    settings = otlp_settings(endpoint=endpoint, protocol=protocol, environ={})
    thread = send_in_background(found, settings, lambda key, text: said.append((key, text)))
    assert thread is not None and not thread.daemon  # delivered before the process exits
    thread.join(3 * SEND_DEADLINE_S)
    assert not thread.is_alive()
    return said


def _attributes(items: Any) -> dict[str, Any]:
    return {a.key: _any_value(a.value) for a in items}


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_desync_verdict_is_a_span_event_in_its_collectives_trace_and_a_log_record(
    protocol: str,
) -> None:
    verdict = _verdict()
    with OtlpReceiver("grpc" if protocol == "grpc" else "http") as receiver:
        said = _send(verdict, receiver.endpoint, protocol)
        [(resource, span)] = receiver.wait_for_spans(1)
        [(log_resource, record)] = receiver.wait_for_logs(1)
    assert said == []
    assert span.trace_id == _ranks_trace_id(verdict)
    assert span.name == model.LIVE_VERDICT_SPAN_NAME
    assert (span.start_time_unix_nano, span.end_time_unix_nano) == (
        verdict.divergence_ns,
        verdict.known_ns,
    )
    assert span.status.code == Status.STATUS_CODE_ERROR and "desync" in span.status.message
    [event] = span.events
    assert event.name == model.LIVE_DESYNC_EVENT and event.time_unix_nano == KNOWN_NS
    facts = _attributes(event.attributes)
    assert facts[model.FINDING_KIND] == "reordered_collectives"
    assert facts[model.FINDING_CULPRIT_RANKS] == [1]
    assert facts[model.PG_NAME] == "0" and facts[model.PG_DESC] == "default_pg"
    assert facts[model.COLLECTIVE_SEQ_ID] == 21 and facts[model.OP] == "all_reduce"
    assert facts[model.LIVE_CALL_SITE] == "/job/train.py:44 in parameters"
    assert facts[model.LIVE_SECONDS] == 1.5 and facts[model.INCIDENT] == "inc-1"
    assert resource[model.SERVICE_INSTANCE_ID] == "train/live/node-7"
    # the log record: the same facts, pointing at the span
    assert (record.trace_id, record.span_id) == (span.trace_id, span.span_id)
    assert record.severity_number == SeverityNumber.SEVERITY_NUMBER_ERROR
    assert record.body.string_value == verdict.line()
    assert _attributes(record.attributes) == facts
    assert log_resource == resource


def test_a_stall_suspect_is_a_warning_in_the_trace_of_the_collective_its_peers_wait_in() -> None:
    suspect = _suspect()
    with OtlpReceiver("grpc") as receiver:
        assert _send(suspect, receiver.endpoint, "grpc") == []
        [(_, span)] = receiver.wait_for_spans(1)
        [(_, record)] = receiver.wait_for_logs(1)
    assert span.trace_id == _ranks_trace_id(suspect)
    assert span.name == model.LIVE_STALL_SPAN_NAME
    assert span.status.code == Status.STATUS_CODE_UNSET  # a suspect, not a proof
    [event] = span.events
    facts = _attributes(event.attributes)
    assert event.name == model.LIVE_STALL_EVENT
    assert facts[model.FINDING_CULPRIT_RANKS] == [2]
    assert facts[model.LIVE_WAITING_RANKS] == [0, 1] and facts[model.LIVE_WAITED_S] == 4.2
    assert facts[model.LIVE_CALL_SITE] == "/job/_common.py:88 in hang"
    assert facts[model.COLLECTIVE_SEQ_ID] == 9
    assert record.severity_number == SeverityNumber.SEVERITY_NUMBER_WARN
    assert (record.trace_id, record.span_id) == (span.trace_id, span.span_id)
    assert record.body.string_value == suspect.line()


def test_a_verdict_and_a_stall_of_one_collective_are_two_spans_of_its_trace() -> None:
    verdict = _verdict(seq=9)
    with OtlpReceiver("http") as receiver:
        _send(verdict, receiver.endpoint, "http/protobuf")
        _send(_suspect(), receiver.endpoint, "http/protobuf")
        spans = [span for _, span in receiver.wait_for_spans(2)]
    assert len({span.trace_id for span in spans}) == 1
    assert len({span.span_id for span in spans}) == 2


def test_a_collector_that_is_down_costs_one_notice_and_no_wait() -> None:
    receiver = OtlpReceiver("http").start()
    endpoint = receiver.endpoint
    receiver.stop()
    said: list[tuple[str, str]] = []
    began = time.monotonic()
    thread = send_in_background(
        _verdict(),
        otlp_settings(endpoint=endpoint, protocol="http/protobuf", environ={}),
        lambda key, text: said.append((key, text)),
    )
    # the caller goes on at once: well before the send's own deadline
    assert time.monotonic() - began < SEND_DEADLINE_S / 2
    assert isinstance(thread, threading.Thread)
    thread.join(3 * SEND_DEADLINE_S)
    assert not thread.is_alive()
    [(key, text)] = said
    assert key == "otlp" and endpoint in text and "the span" in text, text
    assert "the log record" in text and "archive holds it" in text, text


def test_without_an_endpoint_nothing_is_sent() -> None:
    assert send_in_background(_verdict(), None, lambda key, text: None) is None


def test_the_logs_url_sits_beside_the_traces_url() -> None:
    assert signal_url("http://c:4318/v1/traces", Signal.LOGS) == "http://c:4318/v1/logs"
    assert signal_url("https://c/otlp/v1/traces/", Signal.LOGS) == "https://c/otlp/v1/logs"
    assert signal_url("http://c:4318/ingest", Signal.LOGS) is None


def test_a_reruns_verdict_joins_the_reruns_trace_not_the_first_runs() -> None:
    """The run id is part of the trace id, as it is of the ranks' spans."""
    first, rerun = _verdict(), _verdict(run_id="20260101T010000Z-def")
    [first_span] = live_spans(first).resource_spans[0].scope_spans[0].spans
    [rerun_span] = live_spans(rerun).resource_spans[0].scope_spans[0].spans
    assert first_span.trace_id == _ranks_trace_id(first)
    assert rerun_span.trace_id == _ranks_trace_id(rerun) != first_span.trace_id
