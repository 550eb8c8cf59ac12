"""The live check's findings sent to the Collector the ranks export to: the span in the
collective's trace and the log record (``fr_otel.live.otlp``), best effort.

Sent from a thread of its own, so the verdict's incident is declared without waiting for
the network; a Collector that is down or refuses costs the job nothing and is said once
(the record in the archive holds the finding either way). Nothing is spooled: the
finding's record is the copy that stays.

The log record and the live check's blindness metrics (``send_metrics_in_background``)
go where the traces go (``otel.signals``; a traces URL that gives no logs or metrics URL
beside it gives no log record or metric, said once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from fr_otel.config import OtlpSettings
from fr_otel.errors import ConfigError
from fr_otel.live.otlp import LiveFinding, live_logs, live_spans
from fr_otel.otel.delivery import backoff_delay
from fr_otel.otel.exporter import AttemptResult, RequestExporter
from fr_otel.otel.signals import Signal
from fr_otel.otel.transport import exporter_for

SEND_DEADLINE_S = 5.0
"""How long each of the two requests may take, retries included. The sending thread is not
a daemon: a finding made as the job ends is still delivered before ``fr-otel run`` exits,
which waits at most this long twice for a Collector that does not answer."""


def send_in_background(
    found: LiveFinding, otlp: OtlpSettings | None, say_once: Callable[[str, str], None]
) -> threading.Thread | None:
    """Send ``found`` to ``otlp``'s endpoint from a new thread (None: no endpoint is
    configured, nothing to do). A failure is said through ``say_once(key, message)``."""
    if otlp is None:
        return None
    thread = threading.Thread(
        target=_send, args=(found, otlp, say_once), name="fr-otel-live-otlp", daemon=False
    )
    thread.start()
    return thread


def send_metrics_in_background(
    metrics: ExportMetricsServiceRequest,
    otlp: OtlpSettings | None,
    say_once: Callable[[str, str], None],
    after: threading.Thread | None = None,
) -> threading.Thread | None:
    """Send ``metrics`` (``live.otlp.blind_metrics``) to ``otlp``'s endpoint from a new
    thread, as ``send_in_background`` sends a finding, once ``after`` (the previous send)
    has ended: a gauge's last value is the one a Collector keeps, so sends stay in order."""
    if otlp is None:
        return None
    thread = threading.Thread(
        target=_send_metrics,
        args=(metrics.SerializeToString(), otlp, say_once, after),
        name="fr-otel-live-otlp-metrics",
        daemon=False,
    )
    thread.start()
    return thread


def deliver(exporter: RequestExporter, payload: bytes, deadline_s: float) -> str | None:
    """Send one request, retrying what may succeed later within ``deadline_s``; None when
    it was taken, else why not."""
    deadline = time.monotonic() + deadline_s
    retry = 0
    while True:
        outcome = exporter.export(payload, deadline)
        if outcome.result is AttemptResult.SUCCESS:
            return None
        if outcome.result is not AttemptResult.FAILURE_RETRYABLE:
            return outcome.detail
        delay = max(outcome.retry_after_s or 0.0, backoff_delay(retry))
        if time.monotonic() + delay >= deadline:
            return outcome.detail
        time.sleep(delay)
        retry += 1


def _deliver_and_close(exporter: RequestExporter, payload: bytes) -> str | None:
    try:
        return deliver(exporter, payload, SEND_DEADLINE_S)
    finally:
        exporter.shutdown()


def _send(found: LiveFinding, otlp: OtlpSettings, say_once: Callable[[str, str], None]) -> None:
    missed = []
    try:
        why = _deliver_and_close(exporter_for(otlp), live_spans(found).SerializeToString())
        if why is not None:
            missed.append(f"the span ({why})")
        try:
            logs = exporter_for(otlp, Signal.LOGS)
        except ConfigError as exc:
            missed.append(f"the log record ({exc})")
        else:
            if (why := _deliver_and_close(logs, live_logs(found).SerializeToString())) is not None:
                missed.append(f"the log record ({why})")
    except Exception as exc:  # the live check must outlive a failed send
        missed.append(f"the span or the log record ({exc!r})")
    if missed:
        say_once(
            "otlp",
            f"live check: the Collector at {otlp.endpoint} did not get {' or '.join(missed)}"
            f" of the {found.kind} finding; its record in the archive holds it",
        )


def _send_metrics(
    payload: bytes,
    otlp: OtlpSettings,
    say_once: Callable[[str, str], None],
    after: threading.Thread | None,
) -> None:
    if after is not None:
        after.join()
    try:
        why = _deliver_and_close(exporter_for(otlp, Signal.METRICS), payload)
    except ConfigError as exc:  # no metrics URL beside the traces URL
        why = str(exc)
    except Exception as exc:  # the live check must outlive a failed send
        why = repr(exc)
    if why is not None:
        say_once(
            "otlp-metrics",
            f"live check: the Collector at {otlp.endpoint} did not get its blindness metric"
            f" ({why}); what it cannot read is said here",
        )
