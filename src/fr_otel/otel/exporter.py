"""What an OTLP exporter is: one attempt at one request, and how that attempt ended.

In the style of the OpenTelemetry SDK's ``SpanExporter``, an exporter
(``fr_otel.otel.grpc_exporter``, ``fr_otel.otel.http_exporter``) makes one attempt at one
request and classifies the answer (``ExportOutcome``); it never retries and never raises
for network trouble: ``fr_otel.otel.delivery.send_all`` drives it.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from fr_otel import __version__
from fr_otel.config import OtlpSettings
from fr_otel.otel.payload import Payload

logger = logging.getLogger(__name__)

USER_AGENT = f"fr-otel/{__version__}"


class AttemptResult(enum.Enum):
    """How one export attempt ended (a whole export's result is ``fr_otel.sinks.ExportResult``)."""

    SUCCESS = "success"
    """Accepted (possibly with some spans rejected: the spec forbids retrying those)."""
    FAILURE_RETRYABLE = "failure_retryable"
    """Not accepted, but the same request may succeed later (server down, throttling)."""
    FAILURE = "failure"
    """Not accepted and must not be sent again (bad data, unauthorised, not found)."""
    TOO_LARGE = "too_large"
    """Refused for its size: send it again in smaller pieces."""


@dataclass(frozen=True)
class ExportOutcome:
    """One attempt's result with what the server said about it."""

    result: AttemptResult
    detail: str = ""
    """The server's message or the network error, for reports and logs."""
    retry_after_s: float | None = None
    """The server's ``Retry-After`` / ``RetryInfo`` delay, when it gave one."""
    rejected_spans: int = 0
    """Spans a successful answer says it dropped (OTLP partial success)."""


class RequestExporter(Protocol):
    """Makes one attempt at delivering one request; see ``send_all`` for the retries."""

    def export(self, request: Payload, deadline: float) -> ExportOutcome:
        """Send ``request`` once, giving up at ``deadline`` (a ``time.monotonic()`` instant).

        Must not raise for network or server problems: they are outcomes.
        """
        ...

    def shutdown(self) -> None:
        """Release connections. The exporter is not used afterwards."""
        ...


@dataclass(frozen=True, kw_only=True)
class ExporterOptions:
    """What both exporters take besides the endpoint (``OTEL_EXPORTER_OTLP_*``)."""

    headers: Mapping[str, str] | None = None
    compression: str = "gzip"
    timeout_s: float = 10.0
    certificate: Path | None = None
    client_key: Path | None = None
    client_certificate: Path | None = None

    @classmethod
    def from_settings(cls, settings: OtlpSettings) -> ExporterOptions:
        return cls(
            headers=settings.headers,
            compression=settings.compression,
            timeout_s=settings.timeout_s,
            certificate=settings.certificate,
            client_key=settings.client_key,
            client_certificate=settings.client_certificate,
        )


def success_outcome(response: ExportTraceServiceResponse) -> ExportOutcome:
    """An accepted request's outcome, with the spans its answer says were dropped."""
    partial = response.partial_success
    if partial.rejected_spans or partial.error_message:
        logger.warning(
            "receiver accepted the request but rejected %d spans: %s",
            partial.rejected_spans,
            partial.error_message,
        )
    return ExportOutcome(
        AttemptResult.SUCCESS, partial.error_message, rejected_spans=partial.rejected_spans
    )
