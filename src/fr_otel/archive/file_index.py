"""What an incident's rank files' footers say, kept beside them by the import that wrote
them, so that reading the incident again need not open every footer.

``ARCHIVE/job=<job>/incident=<incident>/_files.json`` (the ``*.parquet`` globs do not
match it). Reading and checking a footer means opening its file, a cost per rank file
that adds up to a noticeable part of a re-analysis, and to seconds at thousands of ranks.
Like Parquet datasets' ``_metadata`` summary, it is derived data: an entry counts only
while its file's size and modification time are the ones recorded (rsync's quick check),
so a file written, replaced or cut short since is checked again from its footer, and a
file without an entry is checked as before. A file damaged in place without either
changing is still caught: a read that fails is retried with every file's pages decoded
(``checks.verifying_pages``), and that never uses this.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from fr_otel.archive.layout import staging_path

INDEX_NAME = "_files.json"
INDEX_VERSION = 1

Facts = dict[str, Any]
"""One file's entry: size, mtime_ns, version, rows, time_span, columns, members."""


def index_path(folder: Path) -> Path:
    return folder / INDEX_NAME


def read_index(folder: Path) -> dict[str, Facts]:
    """File name -> its recorded facts; empty when there is no usable index."""
    try:
        data = json.loads(index_path(folder).read_text())
        if data.get("index_version") != INDEX_VERSION:
            return {}
        column_sets = [frozenset(map(str, names)) for names in data["column_sets"]]
        files: dict[str, Facts] = {}
        for name, facts in data["files"].items():
            files[str(name)] = {**facts, "columns": column_sets[int(facts["columns"])]}
        return files
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return {}


def stat_key(path: Path) -> tuple[int, int] | None:
    """(size, modification time in ns) of ``path``, or None when it cannot be read."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def matches(facts: Facts, key: tuple[int, int] | None) -> bool:
    """Does an entry still describe the file whose ``stat_key`` is ``key``?"""
    return key is not None and (facts.get("size"), facts.get("mtime_ns")) == key


def write_index(folder: Path, entries: Iterable[tuple[str, Facts]]) -> None:
    """Merge ``entries`` (file name, facts: columns a set) into ``folder``'s index, drop
    the entries of files no longer there, and write it atomically. The caller holds the
    incident's lock (``manifest.exclusive``). Best effort: an index that cannot be
    written only means the footers are read again."""
    # the new entries' files were just looked at: only earlier ones may be gone
    files = {name: facts for name, facts in read_index(folder).items() if (folder / name).exists()}
    files.update(entries)
    codes: dict[frozenset[str], int] = {}  # each distinct column set, written once
    written = {
        name: {**facts, "columns": codes.setdefault(facts["columns"], len(codes))}
        for name, facts in sorted(files.items())
    }
    data = {
        "index_version": INDEX_VERSION,
        "column_sets": [sorted(names) for names in codes],
        "files": written,
    }
    final = index_path(folder)
    staged = staging_path(final)
    try:
        staged.write_text(json.dumps(data, separators=(",", ":")))
        os.replace(staged, final)
    except OSError:
        staged.unlink(missing_ok=True)
