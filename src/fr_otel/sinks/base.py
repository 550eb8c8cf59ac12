"""What every sink is: the ``RecordSink`` protocol and the ``ExportResult`` it returns.

Modelled on OpenTelemetry's ``SpanExporter``: a small interface whose ``export`` reports
what happened as a value rather than raising for what the outside world did (a Collector
down, spans refused). Programming errors and local failures (a full disk) still raise;
the caller decides whether they are fatal (the recorder's flush carries on).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import pyarrow as pa
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from fr_otel.otel.delivery import SendReport


@dataclass(kw_only=True)
class ExportResult:
    """What one ``export`` call of one sink did."""

    target: str
    """Where the records went (a file, a folder, an endpoint), for messages."""
    written: int = 0
    """Rows (Parquet) or spans (everything else) the target took."""
    spooled: int = 0
    """Spans the target did not take in time, kept in the spool for a later resend."""
    rejected: int = 0
    """Spans the target refused for good."""
    resent: int = 0
    """Spans of earlier exports delivered from the spool on the way."""
    files: list[Path] = field(default_factory=list)
    """Files written."""
    problems: list[str] = field(default_factory=list)
    """What went wrong without stopping the export."""
    send: SendReport | None = None
    """The transport's own account (OTLP only): attempts, reasons, deadline."""

    @property
    def ok(self) -> bool:
        """Everything arrived where it was sent."""
        return not self.spooled and not self.rejected and not self.problems


@runtime_checkable
class RecordSink(Protocol):
    """Takes tables of canonical rows (``fr_otel.schema.RECORD_SCHEMA``) somewhere.
    ``pg_ranks`` may come as a dictionary column (each distinct member list once: the
    recorder's rows, ``export``'s), which every sink here takes as it is."""

    def export(self, table: pa.Table) -> ExportResult:
        """Export every row of ``table``; may be called many times."""
        ...

    def shutdown(self) -> None:
        """Release what the sink holds (connections). It is not used afterwards."""
        ...


@runtime_checkable
class SpanSink(RecordSink, Protocol):
    """A sink that writes spans, so it can take spans made elsewhere (the analyzer's
    verdicts) into the same output as the rows'."""

    def export_spans(
        self, table: pa.Table | None, extra: Sequence[ExportTraceServiceRequest]
    ) -> ExportResult:
        """Export the spans of ``table`` (none when it is None) followed by ``extra``."""
        ...
