"""Rank files of an archive that lives only as long as one analysis: Arrow IPC, not Parquet.

``fr-otel analyze DUMPS`` imports the dumps into a temporary archive that DuckDB reads
once and then removes. There, Parquet's encoding was wasted work: writing a 2,000-entry
rank file took ~4 ms against ~1 ms for Arrow IPC, and the workers' time is most of the
command's. The rows are in their shared form (``dumps.parse.shared_schema``): each stack,
group name and constant once per file, as a dictionary. DuckDB scans them mapped into
memory (``rows``). At 256 ranks x 2,000 entries the import's workers used 1.0-1.3 CPU-s
against 1.8-1.9 s for Parquet, and the analyzer's first pass over the rows took 0.22 s
against 0.25-0.30 s.

Nothing but ``analysis.source`` reads these files, and only from the import that just
wrote them: they are not an archive format (``fr-otel import`` writes Parquet).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

SUFFIX = ".arrow"

MAX_FILES = 1024
"""Imports of more dumps write Parquet even for an analysis. There the analysis, not the
write, is most of the time, and DuckDB's own Parquet scan (parallel, reading only the
columns a query needs) is faster and holds less: at 8,192 ranks x 2,000 entries, lz4
scratch files read through a ``pyarrow.dataset`` took 83.1 s and 3.74 GB against 75.5 s
and 3.26 GB from Parquet. Uncompressed, they would also need ~5 GB of temporary space."""


_MAGIC = b"ARROW1"
_WRITE_BUFFER = 1 << 20


def is_scratch(path: Path) -> bool:
    """A scratch file by its name."""
    return path.suffix == SUFFIX


def is_scratch_file(path: Path) -> bool:
    """A scratch file by its first bytes (a staged file's name ends in ``.tmp``)."""
    with path.open("rb") as handle:
        return handle.read(len(_MAGIC)) == _MAGIC


def write(table: pa.Table, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    # buffered: unbuffered, the writer makes a system call per buffer (~180 a file)
    with (
        pa.output_stream(str(path), buffer_size=_WRITE_BUFFER) as sink,
        ipc.new_file(sink, table.schema) as writer,
    ):
        writer.write_table(table)


def read(path: Path) -> pa.Table:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with pa.OSFile(str(path)) as source:  # read, not mapped: the file is replaced next
        return ipc.open_file(source).read_all()


def rows(paths: Sequence[Path]) -> pa.Table:
    """The rows of ``paths`` (files ``write`` wrote, of one schema), for DuckDB to scan:
    one table over the files mapped into memory, not copied. DuckDB scans it far faster
    than a ``pyarrow.dataset`` of the files: at 256 x 2,000 the analyzer's first pass
    took 0.22 s against 0.39-0.45 s (and 0.25-0.30 s from Parquet). The pages DuckDB
    reads count in the process's RSS, up to ~600 KB a rank, but are the page cache's:
    clean, and given back under memory pressure. At 1,024 ranks ``analyze`` peaked at
    1.63 GB (5.8 s) against 1.02 GB (6.8 s) with Parquet."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    tables = []
    for path in paths:
        with pa.memory_map(str(path)) as source:
            tables.append(ipc.open_file(source).read_all())
    return pa.concat_tables(tables)
