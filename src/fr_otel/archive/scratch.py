"""Rank files of an archive that lives only as long as one analysis: Arrow IPC, not Parquet.

``fr-otel analyze DUMPS`` imports the dumps into a temporary archive that DuckDB reads
once and then removes. There, Parquet's encoding is wasted work: it costs several times
what writing Arrow IPC does, and the workers' writes are most of the command's time. The
rows are in their shared form (``dumps.parse.shared_schema``): each stack, group name and
constant once per file, as a dictionary. DuckDB scans them mapped into memory (``rows``),
with no pages to decompress, so the analyzer's first pass is no slower than over Parquet.

Nothing but ``analysis.source`` reads these files, and only from the import that just
wrote them: they are not an archive format (``fr-otel import`` writes Parquet).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

SUFFIX = ".arrow"

MAX_FILES = 1024
"""Imports of more dumps write Parquet even for an analysis. There the analysis, not the
write, is most of the time, and DuckDB's own Parquet scan (parallel, reading only the
columns a query needs) is faster and holds less than a ``pyarrow.dataset`` over lz4
scratch files. Uncompressed, scratch files of that many dumps would also fill gigabytes
of temporary space."""


MEMORY_FOLDER = Path("/dev/shm")
"""Linux's shared-memory folder (tmpfs), where an analysis's scratch files go when they fit
(``memory_folder``)."""

SCRATCH_PER_DUMP_BYTE = 2
"""Bytes of scratch file per byte of dump, an upper estimate: a scratch file is somewhat
larger than the pickled dump it came from, and smaller than a JSON dump (JSON spells out
what the rows store as numbers)."""

MEMORY_SHARE = 4
"""The scratch files go to memory only where this many times their estimate fits both in
the folder's free space and in the memory the kernel says is available."""

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


def mapped(path: Path) -> pa.Table:
    """The rows of ``path`` (a file ``write`` wrote), mapped into memory, not copied: valid
    while the table lives, even once the file is renamed or removed."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    with pa.memory_map(str(path)) as source:
        return ipc.open_file(source).read_all()


def rows(paths: Sequence[Path], ready: Mapping[Path, pa.Table] | None = None) -> pa.Table:
    """The rows of ``paths`` (files ``write`` wrote, of one schema), for DuckDB to scan:
    one table over the files mapped into memory, not copied. DuckDB scans it far faster
    than a ``pyarrow.dataset`` of the files, and somewhat faster than Parquet. The pages
    DuckDB reads count in the process's RSS, a whole scratch file a rank, but are the page
    cache's: clean, and given back under memory pressure, so ``analyze``'s peak RSS is
    above what it is with Parquet while the analysis itself is quicker. ``ready``: files
    already ``mapped``, by path (the import's, ``ImportReport.scratch_tables``)."""
    import pyarrow as pa

    ready = ready or {}
    return pa.concat_tables([ready[path] if path in ready else mapped(path) for path in paths])


def memory_folder(paths: Sequence[str | Path], *, folder: Path | None = None) -> Path | None:
    """``folder`` (default ``MEMORY_FOLDER``: tmpfs, memory) for the temporary archive of
    an analysis of the dumps in ``paths`` when their scratch files fit there with room to
    spare (``MEMORY_SHARE``); None, the system's temporary folder, otherwise: no such
    folder, no available-memory figure (not Linux), too little memory, or more than
    ``MAX_FILES`` dumps (Parquet then, which DuckDB reads with ``read`` rather than
    mapping it, so that tmpfs would hold it outside the analysis's RSS and memory limit).

    On a disk-backed temporary folder the workers' writes, and the removal of the files
    afterwards, wait on the disk whenever it is busy, as it is when a dying job has just
    written its dumps and checkpoints: the command then takes longer, and more CPU, than
    with the files in /dev/shm, which no disk holds up. On a quiet disk the two are alike,
    so tmpfs costs nothing there. The files take memory either way (tmpfs pages, or the page
    cache's until written back); DuckDB's mapped reads count them in the analysis's RSS.
    """
    # here: importing the dumps package brings in pyarrow.compute, which reading an
    # archive's scratch files never needs
    from fr_otel.dumps.discover import discover

    folder = MEMORY_FOLDER if folder is None else folder
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        return None
    files = discover(list(paths)).files
    if not files or len(files) > MAX_FILES:
        return None
    available = _memory_available()
    if available is None:
        return None
    need = 0
    for dump in files:
        try:
            need += dump.path.stat().st_size * SCRATCH_PER_DUMP_BYTE
        except OSError:  # gone since it was listed: the import names it
            continue
    room = min(shutil.disk_usage(folder).free, available)
    return folder if need * MEMORY_SHARE <= room else None


def _memory_available() -> int | None:
    """The kernel's estimate of the memory available without swapping (bytes)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                if name == "MemAvailable":
                    return int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
