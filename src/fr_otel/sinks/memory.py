"""A sink that keeps what it is given, for tests of code that takes sinks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fr_otel.sinks.base import ExportResult

if TYPE_CHECKING:
    import pyarrow as pa
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )


@dataclass(kw_only=True)
class MemorySink:
    """Keeps each exported table (and spans made elsewhere) in order; takes everything."""

    tables: list[pa.Table] = field(default_factory=list)
    extra: list[ExportTraceServiceRequest] = field(default_factory=list)
    shut_down: bool = False

    def export(self, table: pa.Table) -> ExportResult:
        return self.export_spans(table, ())

    def export_spans(
        self, table: pa.Table | None, extra: Sequence[ExportTraceServiceRequest]
    ) -> ExportResult:
        if self.shut_down:
            raise RuntimeError("MemorySink used after shutdown")
        if table is not None:
            self.tables.append(table)
        self.extra.extend(extra)
        spans = sum(len(s.spans) for r in extra for rs in r.resource_spans for s in rs.scope_spans)
        return ExportResult(
            target="memory", written=(table.num_rows if table is not None else 0) + spans
        )

    def shutdown(self) -> None:
        self.shut_down = True
