"""What the span sinks share: one encoder for every span output, and ``export`` in terms of
``export_spans``.

The wire encoder (``fr_otel.otel.wire``) is the one encoder: OTLP sends its bytes as they
are, and the file sinks parse them into messages (its requests decode to exactly what the
protobuf encoder builds, which ``tests/unit/test_otel_wire.py`` holds it to).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fr_otel.otel.payload import as_message
from fr_otel.otel.wire import encode_requests_fast
from fr_otel.sinks.base import ExportResult

if TYPE_CHECKING:
    import pyarrow as pa
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

Resource = Mapping[str, str | int]
"""Resource attributes every span gets besides its rank's (``OTEL_RESOURCE_ATTRIBUTES``)."""


def configured_resource() -> dict[str, str | int]:
    """``OTEL_RESOURCE_ATTRIBUTES``, the span sinks' default resource."""
    from fr_otel import config

    return dict(config.resource_attributes())


def wire_requests(table: pa.Table | None, resource: Resource) -> Iterator[bytes]:
    """The spans of ``table`` as serialized requests, encoded as they are pulled."""
    if table is None:
        return iter(())
    return encode_requests_fast(table, resource=resource)


def span_messages(
    table: pa.Table | None, resource: Resource, extra: Sequence[ExportTraceServiceRequest]
) -> Iterator[ExportTraceServiceRequest]:
    """The spans of ``table`` and then ``extra``, as messages (for the file formats),
    made as they are pulled: a message object costs far more memory than the span's bytes,
    and a large export's messages held all at once run to gigabytes."""
    yield from (as_message(r) for r in wire_requests(table, resource))
    yield from extra


class SpansFromRows:
    """``export(table)`` for a sink that implements ``export_spans``."""

    def export_spans(
        self, table: pa.Table | None, extra: Sequence[ExportTraceServiceRequest]
    ) -> ExportResult:
        raise NotImplementedError

    def export(self, table: pa.Table) -> ExportResult:
        return self.export_spans(table, ())

    def shutdown(self) -> None:
        """Nothing held between exports."""


@dataclass(kw_only=True)
class SpanFileSink(SpansFromRows):
    """A file format of spans: ``path`` is written anew on each export."""

    path: Path
    resource: Resource = field(default_factory=configured_resource)

    def __post_init__(self) -> None:
        self.path = Path(self.path)  # a caller's str works too

    @staticmethod
    def write(requests: Iterable[ExportTraceServiceRequest], path: Path) -> int:
        """The format's writer: the spans written."""
        raise NotImplementedError

    def export_spans(
        self, table: pa.Table | None, extra: Sequence[ExportTraceServiceRequest]
    ) -> ExportResult:
        spans = type(self).write(span_messages(table, self.resource, extra), self.path)
        return ExportResult(target=str(self.path), written=spans, files=[self.path])
