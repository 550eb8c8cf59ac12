"""The Parquet archive as a sink: each export writes its rows' rank files and manifests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from fr_otel.archive.rows import write_rows
from fr_otel.sinks.base import ExportResult


@dataclass(kw_only=True)
class ParquetSink:
    """Writes into ``archive`` (``fr_otel.archive.rows.write_rows``): a rank's file
    replaces the one an earlier export of the same (job, incident) wrote."""

    archive: Path

    def __post_init__(self) -> None:
        self.archive = Path(self.archive)  # a caller's str works too

    def export(self, table: pa.Table) -> ExportResult:
        """Raises what writing raises (``OSError`` for a full disk): nothing was kept."""
        written = write_rows(table, self.archive)
        result = ExportResult(target=str(self.archive), written=table.num_rows, files=written)
        if not written:
            result.written = 0
            result.problems.append("no entries to archive")
        return result

    def shutdown(self) -> None:
        """Every export is complete on disk when it returns."""
