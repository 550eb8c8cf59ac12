"""Jaeger JSON files (Jaeger UI's "Upload", no backend needed) as a sink."""

from __future__ import annotations

from dataclasses import dataclass

from fr_otel.otel.jaegerjson import write_jaeger_json
from fr_otel.sinks.spans import SpanFileSink


@dataclass(kw_only=True)
class JaegerJsonSink(SpanFileSink):
    """One trace per collective instance, one process per rank."""

    write = staticmethod(write_jaeger_json)
