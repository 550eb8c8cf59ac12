"""The live check's blindness reaches a real OTLP receiver (gRPC and HTTP) as metrics when
it changes: the gauge ``fr_otel.live.blind_ranks`` counts and names the ranks whose rings
it cannot read (a real ring file that is not a ring), with the job, run id and host, and
the monotonic ``fr_otel.live.blind_episodes`` counts the times ranks became unreadable;
nothing is sent while nothing changes, and a receiver that is down is said once."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, Metric

from fr_otel import config
from fr_otel.live.agent import LiveCheck
from fr_otel.live.send import SEND_DEADLINE_S
from fr_otel.otel import model
from fr_otel.recorder.ring import ring_base
from tests.live_rings import WORLD, Rank, signature
from tests.otlp_receiver import OtlpReceiver, _any_value


def _settings(tmp_path: Path, endpoint: str, protocol: str) -> config.RecorderSettings:
    otlp = config.otlp_settings(endpoint=endpoint, protocol=protocol, environ={})
    return config.recorder_settings(
        {"archive": tmp_path / "archive", "job": "job", "run_id": "run", "otlp": otlp}
    )


@pytest.fixture
def receiver(request: pytest.FixtureRequest) -> Iterator[OtlpReceiver]:
    with OtlpReceiver(protocol=request.param) as started:
        yield started


def live_check(settings: config.RecorderSettings, notices: list[str]) -> LiveCheck:
    """A live check of ``settings`` (not started) whose notices go to ``notices``."""

    def end_job() -> None:
        raise AssertionError("the report policy never ends the job")

    return LiveCheck(
        settings=settings,
        live=config.LiveSettings(),
        on_verdict=lambda verdict: None,
        on_notice=notices.append,
        end_job=end_job,
    )


def _point(metric: Metric) -> tuple[int, dict[str, Any]]:
    [point] = metric.gauge.data_points if metric.HasField("gauge") else metric.sum.data_points
    return point.as_int, {a.key: _any_value(a.value) for a in point.attributes}


def _join_sends(check: LiveCheck) -> None:
    sent = check._blind_sent
    assert sent is not None and not sent.daemon
    sent.join(3 * SEND_DEADLINE_S)
    assert not sent.is_alive()


@pytest.mark.parametrize("receiver", ["grpc", "http"], indirect=True)
def test_the_blindness_is_sent_as_metrics_when_it_changes(
    tmp_path: Path, receiver: OtlpReceiver
) -> None:
    protocol = "grpc" if receiver.protocol == "grpc" else "http/protobuf"
    settings = _settings(tmp_path, receiver.endpoint, protocol)
    ranks = [Rank(settings.rings, rank) for rank in WORLD]
    try:
        broken = ring_base(settings.rings, "job", 3, "run")
        broken.with_suffix(".ring").write_bytes(b"not a ring" * 100)
        broken.with_suffix(".meta").write_text("")
        for rank in ranks:
            rank.issue(signature("all_reduce", 1000))
        notices: list[str] = []
        check = live_check(settings, notices)
        check.look()
        check.look()  # the same blindness: nothing more is sent
        _join_sends(check)
        check._note_blind({})  # rank 3 is read again
        _join_sends(check)
    finally:
        for rank in ranks:
            rank.writer.close()

    metrics = receiver.wait_for_metrics(4)
    assert [m.name for _, m in metrics] == [
        model.LIVE_BLIND_RANKS_METRIC,
        model.LIVE_BLIND_EPISODES_METRIC,
    ] * 2
    resource = metrics[0][0]
    assert resource[model.SERVICE_NAME] == "job"
    assert resource[model.SERVICE_INSTANCE_ID] == f"job/live/{socket.gethostname()}"
    facts = {
        model.JOB: "job",
        model.RUN_ID: "run",
        model.HOST_NAME: socket.gethostname(),
    }
    (_, lost), (_, lost_episodes), (_, back), (_, back_episodes) = metrics
    assert lost.unit == "{rank}"
    assert _point(lost) == (1, {**facts, model.LIVE_RANKS: ["3"]})
    assert _point(back) == (0, {**facts, model.LIVE_RANKS: []})
    assert _point(lost_episodes) == _point(back_episodes) == (1, facts)
    assert lost_episodes.sum.is_monotonic
    assert (
        lost_episodes.sum.aggregation_temporality
        == AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    )
    assert len(receiver.received) == 2, "one request per change, none while nothing changed"
    assert [n for n in notices if "blind" in n or "again" in n] == notices
    assert len(notices) == 2


def test_a_collector_that_is_down_is_said_once(tmp_path: Path) -> None:
    down = OtlpReceiver(protocol="http").start()
    endpoint = down.endpoint
    down.stop()
    notices: list[str] = []
    check = live_check(_settings(tmp_path, endpoint, "http/protobuf"), notices)
    check._note_blind({3: "unreadable"})
    _join_sends(check)
    check._note_blind({})
    _join_sends(check)
    failures = [n for n in notices if "blindness metric" in n]
    assert len(failures) == 1 and endpoint in failures[0], notices
