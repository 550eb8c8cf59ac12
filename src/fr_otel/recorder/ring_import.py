"""Rings into the archive: the recorder's ring files (``ARCHIVE/_rings``) of ranks nobody
flushed, for ``fr-otel import`` and ``fr-otel analyze`` of a ring folder."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from fr_otel import config
from fr_otel.archive.rows import write_rows
from fr_otel.recorder.ring import TORCH_RING_DIR, RingContents, read_ring
from fr_otel.recorder.table import ring_table


def holds_rings(path: Path) -> bool:
    """A ring file, or a folder with ring files below it."""
    return path.suffix == ".ring" or (path.is_dir() and any(path.rglob("rank-*.ring")))


@dataclass
class RingImport:
    incidents: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Incident -> (rings, entries) written."""
    problems: list[str] = field(default_factory=list)


def import_rings(
    paths: list[Path], target: Path, job: str | None, incident: str | None
) -> RingImport:
    """Write the rings under ``paths`` into the archive ``target``: one incident per run
    (rings of two launches of a job are never mixed), named ``incident`` (default: now,
    ``-rings``), with the run id's last 8 characters appended when there are several."""
    name = incident or time.strftime("%Y%m%dT%H%M%SZ-rings", time.gmtime())
    config.validate_partition_value("incident", name)
    # a rank's torch ring (``_torch/``) is read with its own ring, never as a rank of its own
    bases = sorted(
        {
            p.with_suffix("")
            for path in paths
            for p in ([path] if path.is_file() else path.rglob("rank-*.ring"))
            if p.parent.name != TORCH_RING_DIR
        }
    )
    result = RingImport()
    by_run: dict[str | None, list[RingContents]] = {}
    for base in bases:
        try:
            contents = read_ring(base)
        except (OSError, ValueError) as exc:
            result.problems.append(f"{base}.ring: unreadable: {exc}")
            continue
        by_run.setdefault(contents.run, []).append(contents)
    for run, rings in sorted(by_run.items(), key=lambda item: item[0] or ""):
        named = name if len(by_run) == 1 else f"{name}-{(run or 'norun')[-8:]}"
        tables = [
            ring_table(
                contents,
                job=config.job_name(job) if job or not contents.job else contents.job,
                incident=named,
                dump_time_ns=time.time_ns(),
                members_as_dictionary=True,  # write_rows keeps large groups' lists once
            )
            for contents in rings
        ]
        table = pa.concat_tables(tables)
        write_rows(table, target)
        result.incidents[named] = (len(tables), len(table))
    return result
