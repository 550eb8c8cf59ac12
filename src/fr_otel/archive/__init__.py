"""The Parquet archive: idempotent, hive-partitioned by job and incident."""

from fr_otel.archive.importer import ImportReport, import_dumps

__all__ = ["ImportReport", "import_dumps"]
