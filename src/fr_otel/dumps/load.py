"""One dump file on disk -> canonical rows, with every failure as a ``DumpError``."""

from __future__ import annotations

import os
from io import BufferedReader
from pathlib import Path

from fr_otel.config import pure_python
from fr_otel.dumps import columnar
from fr_otel.dumps.discover import DumpFile
from fr_otel.dumps.parse import ParsedDump, decode_dump_stream, dump_to_table, sniff_format
from fr_otel.errors import DumpError
from fr_otel.pathnames import printable

LoadedDump = ParsedDump


def _open(path: Path) -> BufferedReader:
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise DumpError(path, "missing", "no such file") from None
    except IsADirectoryError:
        raise DumpError(path, "missing", "is a directory, not a dump file") from None
    except OSError as exc:
        raise DumpError(path, "unreadable", exc.strerror or str(exc)) from None


def load_dump_file(
    dump: DumpFile,
    *,
    job: str,
    incident: str,
    members_column: bool = True,
    dictionary_members_above: int | None = None,
    shared: bool = False,
) -> LoadedDump:
    """Read, decode (safely) and convert one dump file (``members_column``,
    ``dictionary_members_above`` and ``shared``: see ``dump_to_table``). A pickle goes to
    columns by the C decoder where it can (``columnar``), else through the restricted
    unpickler."""
    if dump.rank is None:
        raise DumpError(
            dump.path,
            "unnamed",
            "cannot tell the rank: a dump's file name must end in its rank"
            " (e.g. nccl_trace_rank_3, rank_3.json)",
        )
    decoded = None
    with _open(dump.path) as handle:
        # the file's mtime is the best dump time a file can tell
        stat = os.fstat(handle.fileno())
        mtime_ns = stat.st_mtime_ns
        if (
            columnar.AVAILABLE
            and not pure_python()
            and sniff_format(handle.peek(64)[:64]) == "pickle"
        ):
            try:
                fast = columnar.decode_columns(handle.read())
            except columnar.ExpandingPickleError as exc:
                raise DumpError(dump.path, "hostile", str(exc)) from None
            if fast is None:
                handle.seek(0)
            else:
                obj, decoded = fast
                fmt = "pickle"
        if decoded is None:
            obj, fmt = decode_dump_stream(handle, printable(dump.path))
    return dump_to_table(
        obj,
        decoded=decoded,
        path=printable(dump.path),
        source_format=fmt,
        job=job,
        incident=incident,
        rank=dump.rank,
        dump_time_ns=mtime_ns,
        members_column=members_column,
        dictionary_members_above=dictionary_members_above,
        shared=shared,
        source_bytes=stat.st_size,
    )
