"""Repeated transport warnings are collapsed: a Collector that stays down is said once,
then summed up at most once per period, not once per pass."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fr_otel.otel.delivery import send_all
from fr_otel.otel.exporter import AttemptResult, ExportOutcome
from fr_otel.otel.payload import Payload
from fr_otel.otel.repeats import RepeatedWarnings
from fr_otel.sinks.otlp import OtlpSink, transport_warnings
from tests.rows import canonical_row, canonical_table


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_repeating_warning_is_said_once_then_summed_up(caplog: pytest.LogCaptureFixture) -> None:
    clock = _Clock()
    logger = logging.getLogger("tests.repeats")
    gate = RepeatedWarnings(logger=logger, every_s=60, clock=clock)
    with caplog.at_level(logging.INFO, logger="tests.repeats"):
        for second in range(120):
            clock.now = float(second)
            gate.warning("down", "collector down: %s", "refused")
        gate.resolved("down")
        gate.warning("down", "collector down: %s", "refused")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == [
        "collector down: refused",
        "collector down: refused (59 more like it in the last 60 s)",
        "59 more warnings of kind 'down' were held back; that is over now",
        "collector down: refused",
    ]


class _Down:
    def export(self, request: Payload, deadline: float) -> ExportOutcome:
        return ExportOutcome(AttemptResult.FAILURE_RETRYABLE, "refused", retry_after_s=60)

    def shutdown(self) -> None:
        pass


def test_without_a_gate_send_all_warns_each_time(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="fr_otel.otel.delivery"):
        for _ in range(3):
            send_all([b"x"], _Down(), deadline_s=0.05)
    assert sum("not delivered" in r.getMessage() for r in caplog.records) == 3


def test_an_otlp_sink_sending_every_pass_to_a_down_collector_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    table = canonical_table([canonical_row(record_id=i) for i in range(3)])
    gate = transport_warnings()
    with caplog.at_level(logging.WARNING, logger="fr_otel.otel.delivery"):
        for _ in range(5):  # five passes of continuous mode, one rank
            sink = OtlpSink(
                exporter=_Down(),
                spool_dir=tmp_path / "spool",
                deadline_s=0.05,
                resource={},
                warnings=gate,
            )
            assert sink.export(table).spooled == 3
    assert sum("not delivered" in r.getMessage() for r in caplog.records) == 1
