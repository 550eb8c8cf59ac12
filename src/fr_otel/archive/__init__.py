"""The Parquet archive: idempotent, hive-partitioned by job and incident."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fr_otel.archive.importer import ImportReport, import_dumps

__all__ = ["ImportReport", "import_dumps"]


def __getattr__(name: str) -> Any:
    # Lazy: readers of an archive (the analyzer) need the layout, not the import pipeline.
    if name in __all__:
        from fr_otel.archive import importer

        return getattr(importer, name)
    raise AttributeError(f"module 'fr_otel.archive' has no attribute {name!r}")
