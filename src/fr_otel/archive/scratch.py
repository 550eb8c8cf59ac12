"""Rank files of an archive that lives only as long as one analysis: Arrow IPC, not Parquet.

``fr-otel analyze DUMPS`` imports the dumps into a temporary archive that DuckDB reads
once and then removes. There, Parquet's encoding was wasted work: writing a 2,000-entry
rank file took ~4 ms against ~1 ms for Arrow IPC, and the workers' time is most of the
command's. The rows are in their shared form (``dumps.parse.shared_schema``): each stack,
group name and constant once per file, as a dictionary. DuckDB reads the files through a
``pyarrow.dataset`` it scans batch by batch: at 256 ranks x 2,000 entries it copies the
rows it analyses in 0.20-0.33 s, against 0.19-0.25 s from Parquet, and the import is
0.2-0.3 s shorter (2 workers).

Nothing but ``analysis.source`` reads these files, and only from the import that just
wrote them: they are not an archive format (``fr-otel import`` writes Parquet).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as ds

SUFFIX = ".arrow"

COMPRESS_ABOVE_FILES = 1024
"""Imports of more dumps compress their files (lz4): at 8,192 ranks x 2,000 entries the
uncompressed files would take ~5 GB of temporary space, and there the write is a small
share of the analysis. Below, the ~2.5x faster uncompressed write wins."""


_MAGIC = b"ARROW1"
_WRITE_BUFFER = 1 << 20


def is_scratch(path: Path) -> bool:
    """A scratch file by its name."""
    return path.suffix == SUFFIX


def is_scratch_file(path: Path) -> bool:
    """A scratch file by its first bytes (a staged file's name ends in ``.tmp``)."""
    with path.open("rb") as handle:
        return handle.read(len(_MAGIC)) == _MAGIC


def write(table: pa.Table, path: Path, *, compress: bool) -> None:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    options = ipc.IpcWriteOptions(compression="lz4" if compress else None)
    # buffered: unbuffered, the writer makes a system call per buffer (~180 a file)
    with (
        pa.output_stream(str(path), buffer_size=_WRITE_BUFFER) as sink,
        ipc.new_file(sink, table.schema, options=options) as writer,
    ):
        writer.write_table(table)


def read(path: Path) -> pa.Table:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with pa.OSFile(str(path)) as source:  # read, not mapped: the file is replaced next
        return ipc.open_file(source).read_all()


def dataset(paths: Sequence[Path]) -> ds.Dataset:
    """The rows of ``paths`` (files ``write`` wrote, of one schema: the first's), read as
    they are scanned."""
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.ipc as ipc

    with pa.memory_map(str(paths[0])) as source:
        schema = ipc.open_file(source).schema
    return ds.dataset([p.as_posix() for p in paths], schema=schema, format="ipc")
