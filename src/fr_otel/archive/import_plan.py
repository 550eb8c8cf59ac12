"""The import's plan: one task per dump, under its job and incident (an id derived from the
dumps unless the caller names one; each ``incident=I`` folder and torchft quorum apart)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from fr_otel import config
from fr_otel.archive import scratch
from fr_otel.archive.hosts import HostMap, Placement
from fr_otel.archive.layout import rank_file
from fr_otel.archive.stage_dump import Task
from fr_otel.dumps.discover import DumpFile


def default_incident(files: Iterable[DumpFile]) -> str:
    """A stable id for a dump set, so that importing it twice lands in the same place.

    Hashes each file's rank, size and the bytes at both ends (cheap, and unchanged by
    copying the files elsewhere).
    """
    digest = hashlib.sha256()
    for dump in sorted(files, key=lambda d: (d.rank if d.rank is not None else -1, str(d.path))):
        digest.update(f"{dump.rank}:".encode() + os.fsencode(dump.path.name) + b":")
        try:
            with dump.path.open("rb") as handle:
                size = handle.seek(0, 2)
                handle.seek(0)
                head = handle.read(4096)
                handle.seek(max(size - 65536, 0))
                tail = handle.read()
        except OSError:
            continue
        digest.update(f"{size}:".encode())
        digest.update(head)
        digest.update(tail)
    return f"import-{digest.hexdigest()[:12]}"


def quorum_name(base: str, quorum: str | None) -> str:
    return base if quorum is None else f"{base}-quorum{quorum}"


def dump_job(dump: DumpFile, job: str | None, default: str) -> str:
    """The job a dump is imported under: ``job`` (the caller's), else its ``job=J``
    folder's, else ``default`` (``config.job_name``)."""
    return job if job is not None else dump.job or default


def plan_tasks(
    files: list[DumpFile],
    *,
    archive: Path,
    job: str | None,
    default_job: str,
    incident: str | None,
    owners: dict[str, str],
    members_in_files: bool,
    scratch_files: bool,
    hosts: HostMap | None = None,
) -> list[Task]:
    """One task per dump; ``owners``: each job's import lock token; ``hosts``: where each
    rank ran (wins over the host a file's name holds)."""
    suffix = scratch.SUFFIX if scratch_files and len(files) <= scratch.MAX_FILES else ".parquet"
    by_group: dict[tuple[str, str, str], list[DumpFile]] = {}
    for dump in files:
        key = (dump_job(dump, job, default_job), dump.incident or "", dump.quorum or "")
        by_group.setdefault(key, []).append(dump)
    tasks: list[Task] = []
    for (job_name, _, _), group in sorted(by_group.items()):
        quorum = group[0].quorum
        base = incident if incident is not None else default_incident(group)
        name = quorum_name(base, quorum)
        config.validate_partition_value("incident", name)
        for dump in group:
            rank = dump.rank if dump.rank is not None else -1
            tasks.append(
                Task(
                    dump=dump,
                    job=job_name,
                    incident=name,
                    final=rank_file(archive, job_name, name, rank, suffix=suffix),
                    owner=owners[job_name],
                    base=name,
                    members_in_file=members_in_files,
                    placement=_placement(dump, hosts),
                )
            )
    return tasks


def _placement(dump: DumpFile, hosts: HostMap | None) -> Placement | None:
    if hosts is not None and dump.rank is not None and dump.rank in hosts:
        return hosts[dump.rank]
    if dump.host is not None:
        return Placement(host=dump.host, local_rank=None, device=None)
    return None
