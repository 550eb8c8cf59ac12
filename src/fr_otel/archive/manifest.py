"""Each incident's manifest: which ranks it holds and the members of every group.

``ARCHIVE/job=<job>/incident=<incident>/_incident.json`` sits beside the rank files (the
``*.parquet`` globs do not match it). It records what only the whole dump set shows:
group membership (for gloo, inferred across ranks), the ranks that have a dump (even
one with no entries) and the ranks that have none. Readers use it to skip re-deriving
membership from every row; an archive without it is still fully readable.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fr_otel.archive.layout import RANK_FILE_SUFFIXES, partition_dir, staging_path
from fr_otel.errors import ArchiveError

if TYPE_CHECKING:
    import pyarrow as pa

try:  # advisory locking is POSIX; elsewhere concurrent refreshes are not serialised
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

_LOCK_NAME = ".manifest.lock"
"""The lock file, only where a folder cannot be locked (``exclusive``)."""

MANIFEST_NAME = "_incident.json"
MANIFEST_VERSION = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupMembers:
    name: str
    desc: str | None
    ranks: tuple[int, ...]
    inferred: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class Manifest:
    job: str
    incident: str
    ranks: tuple[int, ...]
    """Ranks with a dump in this incident."""
    missing_ranks: tuple[int, ...]
    groups: tuple[GroupMembers, ...]
    snapshot: bool = False
    """A snapshot of a running job (the Collector's archive of a continuous-mode job),
    which the analyzer reads as one: see ``fr_otel.analysis.snapshots``."""

    def to_json(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"snapshot": True} if self.snapshot else {}
        return {
            "manifest_version": MANIFEST_VERSION,
            "job": self.job,
            "incident": self.incident,
            "ranks": list(self.ranks),
            "missing_ranks": list(self.missing_ranks),
            "groups": [
                {"name": g.name, "desc": g.desc, "ranks": list(g.ranks), "inferred": g.inferred}
                for g in self.groups
            ],
            **extra,
        }


def manifest_path(archive: Path, job: str, incident: str) -> Path:
    return partition_dir(archive, job, incident) / MANIFEST_NAME


def write_manifest(archive: Path, manifest: Manifest) -> Path:
    """Write (atomically replace) an incident's manifest."""
    final = manifest_path(archive, manifest.job, manifest.incident)
    staged = staging_path(final)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(json.dumps(manifest.to_json(), indent=1))
        os.replace(staged, final)
    except OSError as exc:
        raise ArchiveError(f"cannot write {final}: {exc.strerror or exc}") from exc
    return final


@contextlib.contextmanager
def exclusive(folder: Path) -> Iterator[None]:
    """One manifest (or file index) refresh at a time per incident. Every rank of a
    recorder flush writes its file and then refreshes: without the lock, a refresh that
    listed the files before another rank's commit could be the last to write, and leave
    that rank out.

    The lock is on the incident folder itself, so that nothing is left in it: a lock file
    stayed in every incident, and removing one after the refresh is unsafe (a process
    waiting on the removed file gets its lock while a newcomer locks a new file of the
    same name: two refreshes at once). Where the filesystem cannot lock a folder (NFS
    emulates ``flock`` with byte-range locks, which need a file open for writing), a
    lock file instead, left in place for that reason."""
    if fcntl is None:  # pragma: no cover - Windows
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    fd = _locked(folder)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


_NO_FOLDER_LOCK = frozenset({errno.EBADF, errno.EINVAL, errno.ENOLCK, errno.EOPNOTSUPP})
"""What ``flock`` on a folder raises where the filesystem cannot lock one."""


def _locked(folder: Path) -> int:
    """An open descriptor holding ``folder``'s exclusive lock (``exclusive``)."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd
    except OSError as exc:
        os.close(fd)
        if exc.errno not in _NO_FOLDER_LOCK:
            raise
    fd = os.open(folder / _LOCK_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


def refresh_manifest(
    archive: Path, job: str, incident: str, groups: Iterable[GroupMembers]
) -> Manifest:
    """Merge ``groups`` into the incident's manifest (they win over what an earlier write
    recorded), recount its ranks from the files present, and write it."""
    with exclusive(partition_dir(archive, job, incident)):
        return _refresh(archive, job, incident, groups)


def _merged(earlier: Iterable[GroupMembers], new: list[GroupMembers]) -> list[GroupMembers]:
    """``new`` over ``earlier``: a new group replaces the earlier ones of its name, but
    for a replica, a group of that name recorded with members disjoint from every new
    one's (replicas share a name, and ranks flushed apart each bring only their own)."""

    def kept(group: GroupMembers) -> bool:
        namesakes = [g for g in new if g.name == group.name]
        if not namesakes:
            return True
        if group.inferred or any(g.inferred for g in namesakes):
            return False  # inferred members only grow: the newer inference has more
        return not any(set(g.ranks) & set(group.ranks) for g in namesakes)

    return [g for g in earlier if kept(g)] + new


def _refresh(archive: Path, job: str, incident: str, groups: Iterable[GroupMembers]) -> Manifest:
    earlier = read_manifest(archive, job, incident)
    merged = _merged(earlier.groups if earlier else (), list(groups))
    folder = partition_dir(archive, job, incident)
    ranks = sorted(
        int(p.stem.removeprefix("rank-"))
        for p in folder.glob("rank-*")
        if p.suffix in RANK_FILE_SUFFIXES
    )
    expected = {r for g in merged for r in g.ranks}
    manifest = Manifest(
        job=job,
        incident=incident,
        ranks=tuple(ranks),
        missing_ranks=tuple(sorted(expected - set(ranks))),
        groups=tuple(sorted(merged, key=lambda g: (g.name, tuple(g.ranks)))),
        snapshot=bool(earlier and earlier.snapshot),
    )
    write_manifest(archive, manifest)
    return manifest


def mark_snapshot(archive: Path, job: str, incident: str) -> None:
    """Note in an incident's manifest that it is a snapshot of a running job."""
    with exclusive(partition_dir(archive, job, incident)):
        manifest = read_manifest(archive, job, incident)
        if manifest is not None and not manifest.snapshot:
            write_manifest(archive, replace(manifest, snapshot=True))


def continuous_incidents(table: pa.Table, flag: str) -> list[tuple[str, str]]:
    """The (job, incident) pairs of ``table`` whose every row has ``flag`` set."""
    every: dict[tuple[str, str], bool] = {}
    columns = (table["job"].to_pylist(), table["incident"].to_pylist(), table[flag].to_pylist())
    for job, incident, set_ in zip(*columns, strict=True):
        every[(job, incident)] = every.get((job, incident), True) and bool(set_)
    return [pair for pair, all_set in every.items() if all_set]


def read_manifest(archive: Path, job: str, incident: str) -> Manifest | None:
    """The incident's manifest, or None when there is none (or it is unreadable)."""
    path = manifest_path(archive, job, incident)
    try:
        data = json.loads(path.read_text())
        return Manifest(
            job=str(data["job"]),
            incident=str(data["incident"]),
            ranks=tuple(int(r) for r in data["ranks"]),
            missing_ranks=tuple(int(r) for r in data["missing_ranks"]),
            groups=tuple(
                GroupMembers(
                    name=str(g["name"]),
                    desc=g.get("desc"),
                    ranks=tuple(int(r) for r in g["ranks"]),
                    inferred=bool(g.get("inferred")),
                )
                for g in data["groups"]
            ),
            snapshot=bool(data.get("snapshot", False)),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def describe_ranks(ranks: Iterable[int], *, limit: int = 12) -> str:
    """``0-4,6,9-63``: ranks as runs of consecutive numbers, at most ``limit`` runs."""
    ordered = sorted(set(ranks))
    if not ordered:
        return "none"
    runs: list[tuple[int, int]] = []
    for rank in ordered:
        if runs and rank == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], rank)
        else:
            runs.append((rank, rank))
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs[:limit]]
    more = f",... ({len(ordered)} in all)" if len(runs) > limit else ""
    return ",".join(parts) + more


def describe_span(span: tuple[int, int]) -> str:
    """``2026-11-29 10:00:01 - 10:12:33 UTC (12m32s)`` for two epoch nanosecond times."""
    first, last = span
    start = time.gmtime(first / 1e9)
    end = time.gmtime(last / 1e9)
    same_day = start[:3] == end[:3]
    text = time.strftime("%Y-%m-%d %H:%M:%S", start) + " - "
    text += time.strftime("%H:%M:%S" if same_day else "%Y-%m-%d %H:%M:%S", end) + " UTC"
    seconds = max(0, round((last - first) / 1e9))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    length = (
        f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
    )
    return f"{text} ({length})"
