"""An incident's log record and count (``otel.incident``) to the Collector the spans go to,
the way spans go: the same settings (``transport.exporter_for`` of each signal), retries
within a deadline (``delivery.send_all``), and what could not be delivered spooled
(``spool``) for ``fr-otel export --otlp --resend``. Never raises: a flush racing a
watchdog, or a verdict already printed, must not fail on it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from fr_otel.config import OtlpSettings
from fr_otel.otel.delivery import send_all
from fr_otel.otel.incident import IncidentCounter, IncidentEvent, incident_logs
from fr_otel.otel.payload import Payload
from fr_otel.otel.signals import Signal, signal_request
from fr_otel.otel.spool import spool

logger = logging.getLogger(__name__)

MIN_ATTEMPT_S = 0.05
"""Less time than this left: spool at once rather than try."""


@dataclass(kw_only=True)
class IncidentDelivery:
    """What became of an incident's log record and count."""

    sent: list[Signal] = field(default_factory=list)
    spooled: list[Signal] = field(default_factory=list)
    lost: list[Signal] = field(default_factory=list)
    """Neither sent nor spooled: refused, no place for it, no spool."""
    reasons: list[str] = field(default_factory=list)
    """Why what was not sent was not."""

    @property
    def ok(self) -> bool:
        return not self.spooled and not self.lost

    def words(self) -> str:
        """'the log record and the count sent' (or spooled, or lost, and why)."""
        parts = [
            f"{' and '.join(_NAMES[s] for s in signals)} {what}"
            for signals, what in (
                (self.sent, "sent"),
                (self.spooled, "spooled"),
                (self.lost, "lost"),
            )
            if signals
        ]
        because = f" ({'; '.join(self.reasons)})" if self.reasons else ""
        return ("; ".join(parts) or "nothing sent") + because


_NAMES = {Signal.LOGS: "the log record", Signal.METRICS: "the count"}


def incident_requests(
    event: IncidentEvent, counter: IncidentCounter
) -> list[tuple[Signal, ExportLogsServiceRequest | ExportMetricsServiceRequest]]:
    """The log record's request, then the count's (counting ``event``)."""
    return [(Signal.LOGS, incident_logs(event)), (Signal.METRICS, counter.count(event))]


def send_incident(
    event: IncidentEvent,
    counter: IncidentCounter,
    settings: OtlpSettings,
    *,
    deadline: float,
    spool_dir: Path | None,
) -> IncidentDelivery:
    """Send the log record and the count of ``event`` to ``settings``' endpoint by
    ``deadline`` (``time.monotonic()``); what is not delivered goes to ``spool_dir``
    (None: nowhere; it is lost, and said so)."""
    result = IncidentDelivery()
    for signal, message in incident_requests(event, counter):
        request = signal_request(signal, message.SerializeToString())
        try:
            unsent, why = _send(signal, request, settings, deadline)
        except Exception as exc:  # the caller's work is done; this is said, never raised
            logger.debug("incident %s: its %s failed", event.incident, signal.value, exc_info=True)
            unsent, why = [], f"{type(exc).__name__}: {exc}"
        if why and why not in result.reasons:
            result.reasons.append(why)
        if unsent is None:
            result.sent.append(signal)
        elif unsent and spool_dir is not None:
            try:
                spool(unsent, spool_dir)
                result.spooled.append(signal)
            except OSError as exc:
                result.reasons.append(f"cannot spool in {spool_dir}: {exc}")
                result.lost.append(signal)
        else:
            result.lost.append(signal)
    return result


def _send(
    signal: Signal, request: bytes, settings: OtlpSettings, deadline: float
) -> tuple[list[Payload] | None, str]:
    """(None, '') when delivered; else what may still be delivered later (empty: nothing,
    it was refused) and why."""
    from fr_otel.otel.transport import exporter_for

    remaining = deadline - time.monotonic()
    if remaining < MIN_ATTEMPT_S:
        return [request], "no time left before the deadline"
    exporter = exporter_for(settings, signal)
    try:
        report = send_all([request], exporter, deadline_s=remaining)
    finally:
        exporter.shutdown()
    if report.ok:
        return None, ""
    why = "; ".join(report.reasons[-2:])
    if report.rejected:
        return [], f"refused: {why}"
    return list(report.unsent), why
