"""Finding an archive's rank files and checking each before anything reads its rows.

Every rank file is checked (its size, its Parquet footer, the archive schema version
that wrote it), so that one damaged file is named, its rank is treated as having no dump
(unknown, never blamed), and the rest is still read.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fr_otel.archive import file_index, footer_members
from fr_otel.archive.layout import partition_dir
from fr_otel.errors import ArchiveError, DumpError
from fr_otel.schema import SCHEMA_VERSION, SCHEMA_VERSION_KEY

if TYPE_CHECKING:
    import pyarrow as pa

    from fr_otel.archive.incidents import Incident

READABLE_VERSIONS = frozenset({"1", footer_members.FOOTER_SCHEMA_VERSION, SCHEMA_VERSION})
"""Versions this fr_otel reads: its own, version 1 (no footer, no host columns: they read
as null) and 2 (large groups' members in the footer, ``archive.footer_members``)."""

_PARQUET_MAGIC = b"PAR1"
_verify_pages: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "fr_otel_verify_pages", default=False
)
"""Also decode every page of every file (see ``verifying_pages``)."""
_CHECK_THREADS = 8
"""Footers read at once: the reads are small and wait on the disk, not the CPU."""


@contextlib.contextmanager
def verifying_pages() -> Iterator[None]:
    """Within it, ``check_files`` decodes every page of every file, not only its footer:
    for a reader that failed on a file whose footer looked fine."""
    token = _verify_pages.set(True)
    try:
        yield
    finally:
        _verify_pages.reset(token)


def pages_verified() -> bool:
    """Whether ``check_files`` decodes every page here (within ``verifying_pages``)."""
    return _verify_pages.get()


@dataclass(frozen=True, kw_only=True, slots=True)
class RankFile:
    """A rank file that can be read, and what its footer says."""

    path: Path
    job: str
    incident: str
    rank: int | None
    rows: int
    time_span: tuple[int, int] | None
    """(first, last) ``time_created_ns`` from the footer's statistics, when it has them."""
    columns: frozenset[str]
    members: tuple[tuple[str, str], ...] = ()
    """The groups whose rows leave ``pg_ranks`` null in the file, their members in its
    footer (``archive.footer_members``): (group name, members as rank runs)."""

    def footer_members(self) -> footer_members.Runs:
        return dict(self.members)

    @classmethod
    def at(
        cls,
        path: Path,
        *,
        rows: int,
        time_span: tuple[int, int] | None,
        columns: frozenset[str],
        members: tuple[tuple[str, str], ...] = (),
    ) -> RankFile:
        """The file at ``path``, its job, incident and rank from its place there."""
        job, incident, rank = partition_of(path)
        return cls(
            path=path,
            job=job,
            incident=incident,
            rank=rank,
            rows=rows,
            time_span=time_span,
            columns=columns,
            members=members,
        )


def partition_of(path: Path) -> tuple[str, str, int | None]:
    """(job, incident, rank) of a rank file, from its place in the archive."""
    job = path.parent.parent.name.removeprefix("job=")
    incident = path.parent.name.removeprefix("incident=")
    stem = path.stem.removeprefix("rank-")
    return job, incident, int(stem) if stem.isdigit() else None


def read_pages(path: Path, columns: list[str] | None = None) -> pa.Table:
    """The file's rows (of those of ``columns`` it has), or a ``DumpError`` (``corrupt``)
    when a page cannot be decoded."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        if columns is not None:
            present = set(parquet.schema_arrow.names)
            columns = [name for name in columns if name in present]
        return parquet.read(columns=columns)
    except (OSError, pa.ArrowException, ValueError) as exc:
        detail = " ".join(str(exc).split())  # one line
        raise DumpError(path, "corrupt", f"unreadable data ({detail})") from None


def check_rank_file(path: Path, *, pages: bool = False) -> RankFile:
    """The file's footer, or a ``DumpError`` saying in one line why it cannot be read:
    ``empty``, ``truncated``, ``corrupt`` or ``foreign`` (written for another archive
    schema version, or not by fr_otel). With ``pages``, every page is decoded too."""
    # here, not above: an archive whose files' index is current opens no footer, and its
    # analysis imports no pyarrow (``fr_otel.schema``)
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with path.open("rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            if size == 0:
                raise DumpError(path, "empty", "0 bytes: its write never happened (disk full?)")
            if size < 12:
                raise DumpError(path, "truncated", f"{size} bytes: cut short, no Parquet footer")
            handle.seek(size - 8)
            tail = handle.read(8)
    except OSError as exc:
        raise DumpError(path, "unreadable", exc.strerror or str(exc)) from None
    footer_length = int.from_bytes(tail[:4], "little")
    if tail[4:] != _PARQUET_MAGIC or footer_length + 12 > size:
        raise DumpError(path, "truncated", f"{size} bytes: cut short, no Parquet footer at its end")
    try:
        metadata = pq.read_metadata(path)
    except (OSError, pa.ArrowException) as exc:
        detail = " ".join(str(exc).split())  # one line
        raise DumpError(path, "corrupt", f"unreadable Parquet footer ({detail})") from None
    key_values = metadata.metadata or {}
    version = key_values.get(SCHEMA_VERSION_KEY)
    if version is not None and version.decode(errors="replace") not in READABLE_VERSIONS:
        raise DumpError(
            path,
            "foreign",
            f"written for archive schema version {version.decode(errors='replace')}; this"
            f" fr_otel reads versions {', '.join(sorted(READABLE_VERSIONS))} (import the"
            " dumps again, or use the fr_otel that wrote it)",
        )
    # by path: ``schema.names`` are leaf names, "element" for every list
    parquet_schema = metadata.schema
    columns = frozenset(
        parquet_schema.column(i).path.split(".", 1)[0] for i in range(len(parquet_schema))
    )
    if version is None:
        _check_columns(path, metadata)
    lifted = key_values.get(footer_members.MEMBERS_KEY)
    members = footer_members.decode(lifted, path) if lifted is not None else {}
    if pages:
        read_pages(path)
    return RankFile.at(
        path,
        rows=metadata.num_rows,
        time_span=_time_span(metadata),
        columns=columns,
        members=tuple(members.items()),
    )


def _check_columns(path: Path, metadata: object) -> None:
    """A file without fr_otel's version mark (older fr_otel, or another writer): its
    canonical columns must have the canonical types."""
    import pyarrow as pa

    from fr_otel.schema import RECORD_SCHEMA

    try:
        schema = metadata.schema.to_arrow_schema()  # type: ignore[attr-defined]
    except (pa.ArrowException, ValueError) as exc:
        detail = " ".join(str(exc).split())
        raise DumpError(path, "corrupt", f"unreadable Parquet schema ({detail})") from None
    for name in ("rank", "record_id", "collective_seq_id", "op"):
        if name not in schema.names:
            raise DumpError(path, "foreign", f"no {name!r} column: not an fr_otel archive file")
    for field_ in schema:
        if field_.name in RECORD_SCHEMA.names:
            expected = RECORD_SCHEMA.field(field_.name).type
            if field_.type != expected and not (
                pa.types.is_dictionary(field_.type) and field_.type.value_type == expected
            ):
                raise DumpError(
                    path,
                    "foreign",
                    f"column {field_.name!r} is {field_.type}, not {expected}: written by"
                    " another archive schema",
                )


def _time_span(metadata: object) -> tuple[int, int] | None:
    md = metadata
    try:
        index = md.schema.names.index("time_created_ns")  # type: ignore[attr-defined]
    except ValueError:
        return None
    low: int | None = None
    high: int | None = None
    for group in range(md.num_row_groups):  # type: ignore[attr-defined]
        stats = md.row_group(group).column(index).statistics  # type: ignore[attr-defined]
        if stats is None or not stats.has_min_max:
            return None
        low = stats.min if low is None else min(low, stats.min)
        high = stats.max if high is None else max(high, stats.max)
    if low is None or high is None or high <= 0:
        return None
    return int(low), int(high)


@dataclass(kw_only=True)
class CheckedFiles:
    """The rank files of an archive (or of one incident), sorted into good and bad."""

    good: list[RankFile] = field(default_factory=list)
    problems: list[DumpError] = field(default_factory=list)
    unusable: list[tuple[str, str, int | None]] = field(default_factory=list)
    """(job, incident, rank) of each file in ``problems``."""

    def unusable_ranks(self, job: str, incident: str) -> set[int]:
        return {
            rank for j, i, rank in self.unusable if j == job and i == incident and rank is not None
        }

    def leave_out(self, file: RankFile, problem: DumpError) -> None:
        """A file whose check passed but whose rows could not be read: it joins ``problems``."""
        self.good = [f for f in self.good if f is not file]
        self.problems.append(problem)
        self.unusable.append((file.job, file.incident, file.rank))

    def require_some(self, where: str) -> None:
        """Raise ``ArchiveError`` when not one file can be read (naming the first 20)."""
        if self.good:
            return
        if not self.problems:
            raise ArchiveError(f"{where} holds no Parquet rank files")
        lines = "\n".join(f"  {p}" for p in self.problems[:20])
        more = f"\n  ... and {len(self.problems) - 20} more" if len(self.problems) > 20 else ""
        raise ArchiveError(
            f"{where}: none of its {len(self.problems)} Parquet rank files can be read:\n"
            f"{lines}{more}"
        )


def check_files(paths: Iterable[Path]) -> CheckedFiles:
    """Check every file (see ``check_rank_file``), a few at a time; a file the import
    that wrote it recorded, unchanged since, is taken from that record
    (``archive.file_index``), unless every page is being verified."""
    files = sorted(paths)
    pages = pages_verified()  # read here: the pool's threads do not see it
    known: dict[Path, RankFile] = {} if pages else _indexed(files)

    def one(path: Path) -> RankFile | DumpError:
        try:
            return check_rank_file(path, pages=pages)
        except DumpError as exc:
            return exc

    unknown = [path for path in files if path not in known]
    if len(unknown) > 16:
        with ThreadPoolExecutor(max_workers=_CHECK_THREADS) as pool:
            found = dict(zip(unknown, pool.map(one, unknown), strict=True))
    else:
        found = {path: one(path) for path in unknown}
    results = [known.get(path) or found[path] for path in files]
    checked = CheckedFiles()
    for path, result in zip(files, results, strict=True):
        if isinstance(result, DumpError):
            checked.problems.append(result)
            checked.unusable.append(partition_of(path))
        else:
            checked.good.append(result)
    return checked


def _indexed(files: list[Path]) -> dict[Path, RankFile]:
    """The files whose folder's index records them as they are now."""
    known: dict[Path, RankFile] = {}
    indexes: dict[Path, dict[str, file_index.Facts]] = {}
    for path in files:
        folder = path.parent
        index = indexes.get(folder)
        if index is None:
            index = indexes[folder] = file_index.read_index(folder)
        facts = index.get(path.name)
        if facts is None or not file_index.matches(facts, file_index.stat_key(path)):
            continue
        file = _from_facts(path, facts)
        if file is not None:
            known[path] = file
    return known


def _from_facts(path: Path, facts: file_index.Facts) -> RankFile | None:
    """The ``RankFile`` an index entry records, or None for one this fr_otel cannot trust
    (another archive schema version, or not well formed): its footer is read instead."""
    try:
        if str(facts["version"]) not in READABLE_VERSIONS:
            return None
        span = facts.get("time_span")
        return RankFile.at(
            path,
            rows=int(facts["rows"]),
            time_span=(int(span[0]), int(span[1])) if span else None,
            columns=frozenset(facts["columns"]),
            members=tuple((str(name), str(runs)) for name, runs in facts.get("members", ())),
        )
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def index_facts(file: RankFile) -> tuple[str, file_index.Facts] | None:
    """``file``'s entry for its folder's index, as it is on disk now (None when it cannot
    be read): what ``check_rank_file`` would find in its footer."""
    key = file_index.stat_key(file.path)
    if key is None:
        return None
    version = SCHEMA_VERSION
    return file.path.name, {
        "size": key[0],
        "mtime_ns": key[1],
        "version": version,
        "rows": file.rows,
        "time_span": list(file.time_span) if file.time_span else None,
        "columns": file.columns,
        "members": [list(pair) for pair in file.members],
    }


def rank_files(archive: Path, only: Incident | None = None) -> list[Path]:
    folder = partition_dir(archive, only.job, only.incident) if only is not None else None
    if folder is not None:
        return sorted(folder.glob("*.parquet"))
    return sorted(archive.glob("job=*/incident=*/*.parquet"))


def describe(archive: Path, only: Incident | None = None) -> str:
    """The archive, or one incident of it, as messages name it."""
    if only is None:
        return str(archive)
    return f"{archive} (job={only.job} incident={only.incident})"
