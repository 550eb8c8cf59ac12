"""Where rows live in an archive, and how they get there without leaving half-files.

An archive is a hive-partitioned Parquet tree::

    ARCHIVE/job=<job>/incident=<incident>/rank-000007.parquet

One file per (job, incident, rank): re-importing the same dumps replaces the files
instead of adding rows. Files are written under a hidden temporary name and renamed into
place, so a reader (or a full disk) never sees a partial file. ``duckdb`` reads an
archive directly::

    SELECT * FROM read_parquet('ARCHIVE/**/*.parquet', hive_partitioning = true)
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fr_otel.archive import scratch
from fr_otel.errors import ArchiveError

try:  # advisory locking is POSIX; elsewhere imports are not announced to readers
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    import pyarrow as pa

# The import is bound by this write. lz4 writes markedly faster than zstd for files only
# somewhat larger. Dictionary encoding pays only on the repetitive text (names, dtypes,
# stacks), and min/max statistics only mean something for scalars; skipping both
# elsewhere makes the write cheaper again. Both encodings name leaf
# columns ("frames.list.element.name"): given a nested column's own name, Parquet
# silently writes it plain.
COMPRESSION = "lz4"
_DELTA_ENCODED = frozenset(
    {
        "pg_ranks",
        "pg_id",
        "record_id",
        "collective_seq_id",
        "op_id",
        "time_created_ns",
        "time_started_ns",
        "time_completed_ns",
    }
)
"""Integer columns that count up or repeat a list: their deltas are small and alike, so
they encode in a fraction of their plain size. ``pg_ranks`` needs it most: a group's
member list is on every row, and once a list passes 8,192 members (64 KB) lz4's window
cannot see its repeats; plain, it is nearly all of a large job's rank file,
delta-encoded it is hundreds of times smaller."""


RANK_FILE_SUFFIXES = (".parquet", scratch.SUFFIX)
"""An archive's rank files, and an analysis's scratch files (``scratch``)."""


def partition_dir(archive: Path, job: str, incident: str) -> Path:
    return archive / f"job={job}" / f"incident={incident}"


def rank_file(
    archive: Path, job: str, incident: str, rank: int, *, suffix: str = ".parquet"
) -> Path:
    """``suffix``: ``.parquet``, or ``scratch.SUFFIX`` for an analysis's own temporary
    archive."""
    return partition_dir(archive, job, incident) / f"rank-{rank:06d}{suffix}"


def staging_path(final: Path, owner: str | None = None) -> Path:
    """A hidden sibling of ``final``: not matched by ``*.parquet`` globs, same filesystem.

    ``owner`` (an ``ImportLock``'s token) marks the file as that import's, so that once
    the import is gone (killed) the next one removes it at once.
    """
    tag = f"{owner}-" if owner else ""
    return final.with_name(f".{final.name}.{tag}{uuid.uuid4().hex[:12]}.tmp")


def write_staged(table: pa.Table, final: Path, owner: str | None = None) -> Path:
    """Write ``table`` next to ``final`` under a temporary name; return that name. A
    scratch file (``scratch.SUFFIX``) is written as Arrow IPC."""
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        staged = staging_path(final, owner)
        if scratch.is_scratch(final):
            scratch.write(table, staged)
        else:
            _write_parquet(table, staged)
    except OSError as exc:
        raise ArchiveError(
            f"cannot write to the archive at {final.parent}: {exc.strerror or exc}"
        ) from exc
    return staged


def read_staged(staged: Path) -> pa.Table:
    """The rows of a file ``write_staged`` wrote (its temporary name does not say which
    format: its first bytes do)."""
    if scratch.is_scratch_file(staged):
        return scratch.read(staged)
    import pyarrow.parquet as pq

    return pq.read_table(staged)


def _write_parquet(table: pa.Table, path: Path) -> None:
    # imported here: readers of an archive need the layout, not the Parquet writer
    import pyarrow as pa
    import pyarrow.parquet as pq

    leaves = [(field.name, path, kind) for field in table.schema for path, kind in _leaves(field)]
    dictionary = [path for _, path, kind in leaves if pa.types.is_string(kind)]
    delta = {
        path: "DELTA_BINARY_PACKED"
        for top, path, kind in leaves
        if top in _DELTA_ENCODED and pa.types.is_integer(kind)
    }
    statistics = [f.name for f in table.schema if not pa.types.is_nested(f.type)]
    pq.write_table(
        table,
        path,
        compression=COMPRESSION,
        use_dictionary=dictionary,
        column_encoding=delta,
        write_statistics=statistics,
    )


def _leaves(field: pa.Field) -> Iterator[tuple[str, pa.DataType]]:
    """Parquet's path and the type of every leaf column under ``field``."""
    import pyarrow as pa

    kind = field.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        yield from _leaves(pa.field(f"{field.name}.list.element", kind.value_type))
    elif pa.types.is_struct(kind):
        for child in kind:
            yield from _leaves(pa.field(f"{field.name}.{child.name}", child.type))
    else:
        yield field.name, kind


def commit_staged(staged: Path, final: Path) -> None:
    """Atomically replace ``final`` with ``staged``."""
    try:
        os.replace(staged, final)
    except OSError as exc:
        raise ArchiveError(
            f"cannot move {staged.name} into {final.parent}: {exc.strerror or exc}"
        ) from exc


def discard_staged(staged: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        staged.unlink()


# --- imports in progress, and what a killed one left behind ------------------------------
#
# An import holds ``ARCHIVE/.imports/<token>.lock`` (flock'ed) while it writes, listing the
# incidents it writes; its temporary files carry the token in their names. Readers ask
# ``writers`` whether an incident is being written; the next import removes the temporary
# files of imports whose lock nobody holds any more (``sweep``).

IMPORTS_DIR = ".imports"
_OWNED_TMP = re.compile(r"\.(?P<token>imp[0-9a-f]{12})-[0-9a-f]+\.tmp$")
STALE_TMP_S = 3600.0
"""A temporary file no import owns (a recorder flush's, a manifest's) is left alone for
this long: its writer may be alive on another host sharing the archive."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Writer:
    """An import writing into an archive right now."""

    token: str
    pid: int | None
    host: str | None
    job: str | None
    incidents: tuple[str, ...] | None
    """None when its lock file could not be read: then every incident counts as written."""
    started: float | None

    def writes(self, job: str, incident: str) -> bool:
        if self.incidents is None:
            return True
        return (self.job is None or self.job == job) and incident in self.incidents

    def describe(self) -> str:
        who = f"pid {self.pid}" if self.pid is not None else "another process"
        if self.host and self.host != _hostname():
            who += f" on {self.host}"
        if self.started is not None:
            who += f", started {time.strftime('%H:%M:%S', time.localtime(self.started))}"
        return f"an import ({who})"


def _hostname() -> str:
    return os.uname().nodename if hasattr(os, "uname") else ""


class ImportLock:
    """Announce an import to readers and to the next import's sweep; see ``writers``."""

    def __init__(self, archive: Path, job: str, incidents: Iterable[str]) -> None:
        self.archive = archive
        self.job = job
        self.incidents: list[str] = sorted(set(incidents))
        self.token = f"imp{uuid.uuid4().hex[:12]}"
        self.path = archive / IMPORTS_DIR / f"{self.token}.lock"
        self._fd: int | None = None

    def __enter__(self) -> ImportLock:
        self.acquire()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()

    def acquire(self) -> None:
        if fcntl is None:  # pragma: no cover - Windows
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # locked and filled under another name first: a reader never sees it unlocked
            pending = self.path.with_suffix(".new")
            fd = os.open(pending, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._fd = fd
            self._write()
            os.replace(pending, self.path)
        except OSError as exc:
            self.release()
            raise ArchiveError(
                f"cannot write to the archive at {self.archive}: {exc.strerror or exc}"
            ) from exc

    def add(self, incidents: Iterable[str]) -> None:
        """Name more incidents this import writes (before it writes them)."""
        self.incidents = sorted(set(self.incidents) | set(incidents))
        if self._fd is not None:
            with contextlib.suppress(OSError):
                self._write()

    def _write(self) -> None:
        assert self._fd is not None
        data = json.dumps(
            {
                "pid": os.getpid(),
                "host": _hostname(),
                "job": self.job,
                "incidents": self.incidents,
                "started": time.time(),
            }
        ).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        with contextlib.suppress(OSError):
            self.path.with_suffix(".new").unlink()
        os.close(self._fd)  # drops the flock
        self._fd = None


def writers(archive: Path) -> tuple[list[Writer], list[tuple[Path, Writer]]]:
    """(imports writing into ``archive`` now, the lock files of imports that were killed
    with what they were writing)."""
    live: list[Writer] = []
    stale: list[tuple[Path, Writer]] = []
    if fcntl is None:  # pragma: no cover - Windows
        return live, stale
    try:
        locks = sorted((archive / IMPORTS_DIR).glob("imp*.lock"))
    except OSError:
        return live, stale
    for path in locks:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue  # released meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                live.append(_read_writer(path, fd))
            else:
                stale.append((path, _read_writer(path, fd)))
        finally:
            os.close(fd)
    return live, stale


def _read_writer(path: Path, fd: int) -> Writer:
    token = path.stem
    try:
        data = json.loads(os.pread(fd, 1 << 16, 0))
        return Writer(
            token=token,
            pid=int(data["pid"]),
            host=str(data.get("host") or "") or None,
            job=str(data["job"]),
            incidents=tuple(str(i) for i in data["incidents"]),
            started=float(data["started"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return Writer(token=token, pid=None, host=None, job=None, incidents=None, started=None)


def sweep(
    archive: Path, *, mine: ImportLock | None = None, also: Iterable[tuple[str, str]] = ()
) -> list[Path]:
    """Remove what killed imports left in ``archive``: their lock files and temporary
    files, in the incidents they were writing and in ``also`` (job, incident) pairs.

    Temporary files of live imports stay, and so do other writers' (recorder flushes,
    manifests) younger than ``STALE_TMP_S``. ``mine`` is the caller's own import, whose
    files go too (it sweeps up after itself). Returns what was removed.
    """
    live, stale = writers(archive)
    live_tokens = {w.token for w in live} - ({mine.token} if mine is not None else set())
    stale_tokens = {w.token for _, w in stale} | ({mine.token} if mine is not None else set())
    folders = {partition_dir(archive, job, incident) for job, incident in also}
    everywhere = False
    for _, writer in stale:
        if writer.incidents is None or writer.job is None:
            everywhere = True
        else:
            folders.update(partition_dir(archive, writer.job, i) for i in writer.incidents)
    temporaries = (
        list(archive.glob("job=*/incident=*/.*.tmp"))
        if everywhere
        else [tmp for folder in sorted(folders) for tmp in folder.glob(".*.tmp")]
    )
    removed: list[Path] = []
    now = time.time()
    for tmp in temporaries:
        match = _OWNED_TMP.search(tmp.name)
        if match is not None:
            token = match.group("token")
            if token in live_tokens or (
                token not in stale_tokens and (archive / IMPORTS_DIR / f"{token}.lock").exists()
            ):
                continue  # its import is alive (or began after ``writers`` looked)
        else:
            try:
                if now - tmp.stat().st_mtime < STALE_TMP_S:
                    continue
            except OSError:
                continue
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
            removed.append(tmp)
    for folder in folders:  # incident folders a killed import had only begun
        with contextlib.suppress(OSError):
            folder.rmdir()
    for path, _ in stale:  # last: a sweep cut short finds them again next time
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed
