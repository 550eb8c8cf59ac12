"""The live check's findings sent to the Collector the ranks export to: the span in the
collective's trace and the log record (``fr_otel.live.otlp``), best effort.

Sent from a thread of its own, so the verdict's incident is declared without waiting for
the network; a Collector that is down or refuses costs the job nothing and is said once
(the record in the archive holds the finding either way). Nothing is spooled: the
finding's record is the copy that stays.

The logs go where the traces go: over gRPC the same target's ``LogsService``; over HTTP the
traces URL with ``/v1/logs`` for its ``/v1/traces`` (a traces URL of another path gives no
logs URL, and the log record is not sent). The live check's blindness metrics
(``send_metrics_in_background``) go the same way: ``MetricsService``, or ``/v1/metrics``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)

from fr_otel.config import OTLP_TRACES_PATH, PROTOCOL_GRPC, OtlpSettings
from fr_otel.live.otlp import LiveFinding, live_logs, live_spans
from fr_otel.otel.delivery import backoff_delay
from fr_otel.otel.exporter import AttemptResult, ExporterOptions, RequestExporter
from fr_otel.otel.grpc_exporter import GRPC_LOGS_METHOD, GRPC_METRICS_METHOD, GrpcExporter
from fr_otel.otel.http_exporter import HttpExporter
from fr_otel.otel.transport import exporter_for

OTLP_LOGS_PATH = "/v1/logs"
OTLP_METRICS_PATH = "/v1/metrics"
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


def beside_traces_url(traces_url: str, path: str) -> str | None:
    """The OTLP/HTTP URL of another signal (``path``: ``/v1/logs``, ``/v1/metrics``)
    beside ``traces_url`` (see the module's docstring)."""
    base, found, rest = traces_url.rpartition(OTLP_TRACES_PATH)
    if not found or rest.strip("/"):
        return None
    return base + path


def logs_url(traces_url: str) -> str | None:
    """The OTLP/HTTP logs URL beside ``traces_url``."""
    return beside_traces_url(traces_url, OTLP_LOGS_PATH)


def _signal_exporter(
    otlp: OtlpSettings, method: str, path: str
) -> GrpcExporter | HttpExporter | None:
    """The exporter of another signal than traces: gRPC ``method`` on the same target, or
    the HTTP URL of ``path`` beside the traces URL (None: there is none)."""
    options = ExporterOptions.from_settings(otlp)
    if otlp.protocol == PROTOCOL_GRPC:
        return GrpcExporter(otlp.endpoint, insecure=otlp.insecure, options=options, method=method)
    url = beside_traces_url(otlp.endpoint, path)
    return HttpExporter(url, options=options) if url is not None else None


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
        logs = _signal_exporter(otlp, GRPC_LOGS_METHOD, OTLP_LOGS_PATH)
        if logs is None:
            missed.append(f"the log record (no logs URL beside {otlp.endpoint})")
        elif (why := _deliver_and_close(logs, live_logs(found).SerializeToString())) is not None:
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
        exporter = _signal_exporter(otlp, GRPC_METRICS_METHOD, OTLP_METRICS_PATH)
        why = (
            f"no metrics URL beside {otlp.endpoint}"
            if exporter is None
            else _deliver_and_close(exporter, payload)
        )
    except Exception as exc:  # the live check must outlive a failed send
        why = repr(exc)
    if why is not None:
        say_once(
            "otlp-metrics",
            f"live check: the Collector at {otlp.endpoint} did not get its blindness metric"
            f" ({why}); what it cannot read is said here",
        )
