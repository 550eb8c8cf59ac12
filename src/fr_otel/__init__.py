"""fr_otel: PyTorch Flight Recorder data as Parquet, DuckDB analysis and OpenTelemetry spans."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["RECORD_SCHEMA", "__version__", "analyze", "import_dumps", "install"]


def __getattr__(name: str) -> Any:
    # Lazy, so that `fr-otel` and light users do not pay for pyarrow and duckdb up front.
    if name == "RECORD_SCHEMA":
        from fr_otel.schema import RECORD_SCHEMA

        return RECORD_SCHEMA
    if name == "analyze":
        from fr_otel.analysis import analyze

        return analyze
    if name == "install":
        from fr_otel.recorder import install

        return install
    if name == "import_dumps":
        from fr_otel.archive import import_dumps

        return import_dumps
    raise AttributeError(f"module 'fr_otel' has no attribute {name!r}")
