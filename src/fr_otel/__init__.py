"""fr_otel: PyTorch Flight Recorder data as Parquet, DuckDB analysis and OpenTelemetry spans."""

from __future__ import annotations

from fr_otel.schema import RECORD_SCHEMA

__version__ = "0.1.0"

__all__ = ["RECORD_SCHEMA", "__version__"]
