"""OTLP as a sink: encode, send (retries, splits, one deadline), spool what is left.

Rows are encoded by the wire encoder as they are sent, never all at once. What the
receiver cannot take before the deadline goes to the spool (``fr_otel.otel.spool``), to be
delivered by ``fr-otel export --otlp --resend`` or, with ``resend_spool``, by the next
export that gets through.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fr_otel.otel.delivery import SendReport, send_all
from fr_otel.otel.exporter import RequestExporter
from fr_otel.otel.payload import Payload
from fr_otel.otel.repeats import RepeatedWarnings
from fr_otel.otel.spool import resend, spool, spooled
from fr_otel.sinks.base import ExportResult
from fr_otel.sinks.spans import Resource, SpansFromRows, configured_resource, wire_requests

if TYPE_CHECKING:
    import pyarrow as pa
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )


def transport_warnings() -> RepeatedWarnings:
    """A gate for the transport's warnings; share one among the sinks of one exporter."""
    return RepeatedWarnings(logger=logging.getLogger("fr_otel.otel.delivery"))


@dataclass(kw_only=True)
class OtlpSink(SpansFromRows):
    """Sends spans through ``exporter`` within ``deadline_s`` per export.

    Interrupted (``KeyboardInterrupt``), what was not delivered is spooled and the
    exception re-raised with the ``ExportResult`` as its ``export_result``.
    """

    exporter: RequestExporter
    spool_dir: Path
    deadline_s: float
    """Seconds one export may take, retries included."""
    resource: Resource = field(default_factory=configured_resource)
    owns_exporter: bool = False
    """``shutdown`` shuts the exporter down too (not when others send through it)."""
    resend_spool: bool = False
    """After an export that got through, deliver what earlier ones spooled."""
    warnings: RepeatedWarnings | None = None
    """Collapse repeated transport warnings (for exports that repeat every few seconds)."""

    @property
    def target(self) -> str:
        return str(getattr(self.exporter, "endpoint", "") or getattr(self.exporter, "target", ""))

    def export_spans(
        self, table: pa.Table | None, extra: Sequence[ExportTraceServiceRequest]
    ) -> ExportResult:
        requests: Iterable[Payload] = itertools.chain(wire_requests(table, self.resource), extra)
        try:
            sent = send_all(
                requests, self.exporter, deadline_s=self.deadline_s, warnings=self.warnings
            )
        except KeyboardInterrupt as exc:
            unsent: SendReport | None = getattr(exc, "send_report", None)
            if unsent is not None:
                exc.export_result = self._settle(unsent)  # type: ignore[attr-defined]
            raise
        result = self._settle(sent)
        if self.resend_spool and not sent.unsent and sent.sent_spans and spooled(self.spool_dir):
            result.resent = resend(self.spool_dir, self.exporter, self.deadline_s).sent_spans
        return result

    def _settle(self, sent: SendReport) -> ExportResult:
        """Spool what was not delivered; the result of ``sent``."""
        if sent.unsent:
            spool(sent.unsent, self.spool_dir)
        return ExportResult(
            target=self.target,
            written=sent.sent_spans,
            spooled=sent.unsent_spans,
            rejected=sent.rejected_spans,
            send=sent,
        )

    def shutdown(self) -> None:
        if self.owns_exporter:
            self.exporter.shutdown()
