"""OTLP JSON lines files (the Collector's ``otlpjsonfile`` format) as a sink."""

from __future__ import annotations

from dataclasses import dataclass

from fr_otel.otel.jsonfile import write_otlp_json
from fr_otel.sinks.spans import SpanFileSink


@dataclass(kw_only=True)
class OtlpJsonSink(SpanFileSink):
    """One line per request."""

    write = staticmethod(write_otlp_json)
