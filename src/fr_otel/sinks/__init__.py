"""Where records go: one ``RecordSink`` per destination, and ``export`` to drive them.

``base`` holds the protocol and ``ExportResult``; ``parquet``, ``otlp``, ``otlpjson``,
``jaeger`` and ``memory`` one sink each (``spans`` what the span sinks share);
``exporting`` reads an archived incident and hands it to sinks. The recorder's flush and
continuous export and ``fr-otel export`` all go through these sinks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fr_otel.sinks.base import ExportResult, RecordSink, SpanSink
    from fr_otel.sinks.exporting import ExportInput, ExportReport, export
    from fr_otel.sinks.jaeger import JaegerJsonSink
    from fr_otel.sinks.memory import MemorySink
    from fr_otel.sinks.otlp import OtlpSink
    from fr_otel.sinks.otlpjson import OtlpJsonSink
    from fr_otel.sinks.parquet import ParquetSink

_WHERE = {
    "ExportResult": "base",
    "RecordSink": "base",
    "SpanSink": "base",
    "ExportInput": "exporting",
    "ExportReport": "exporting",
    "export": "exporting",
    "JaegerJsonSink": "jaeger",
    "MemorySink": "memory",
    "OtlpSink": "otlp",
    "OtlpJsonSink": "otlpjson",
    "ParquetSink": "parquet",
}

__all__ = [
    "ExportInput",
    "ExportReport",
    "ExportResult",
    "JaegerJsonSink",
    "MemorySink",
    "OtlpJsonSink",
    "OtlpSink",
    "ParquetSink",
    "RecordSink",
    "SpanSink",
    "export",
]


def __getattr__(name: str) -> Any:
    # Lazy: a Parquet sink need not import the OTLP encoders and transports.
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fr_otel.sinks' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"fr_otel.sinks.{module}"), name)
