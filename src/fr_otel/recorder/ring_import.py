"""Rings into the archive: the recorder's ring files (``ARCHIVE/_rings``) of ranks nobody
flushed, for ``fr-otel import`` and ``fr-otel analyze`` of a ring folder."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from fr_otel import config
from fr_otel.archive.manifest import mark_snapshot
from fr_otel.archive.rows import write_rows
from fr_otel.recorder.incident_ids import RUN_PART_LENGTH
from fr_otel.recorder.ring import TORCH_RING_DIR, RingContents, adopted, read_ring
from fr_otel.recorder.slot import FIELDS
from fr_otel.recorder.table import past_gaps, ring_table
from fr_otel.recorder.torch_ops import taught_by_peers

_TIMES = [index for index, (name, _) in enumerate(FIELDS) if name in ("created_ns", "done_ns")]
"""Where a slot tuple holds its creation and completion times."""


def holds_rings(path: Path) -> bool:
    """A ring file, or a folder with ring files below it."""
    return path.suffix == ".ring" or (path.is_dir() and any(path.rglob("rank-*.ring")))


@dataclass
class RingImport:
    incidents: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Incident -> (rings, entries) written."""
    problems: list[str] = field(default_factory=list)
    running: dict[str, list[int]] = field(default_factory=dict)
    """Incident -> the ranks whose owner still ran: such an incident is a snapshot."""


def import_rings(
    paths: list[Path], target: Path, job: str | None, incident: str | None
) -> RingImport:
    """Write the rings under ``paths`` into the archive ``target``: one incident per run
    (rings of two launches of a job are never mixed), named ``incident`` (with the run
    id's last 8 characters appended when there are several), or else after the rings
    themselves (``rings_incident``), so that importing the same rings again replaces
    what the first import wrote."""
    if incident is not None:
        config.validate_partition_value("incident", incident)
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
        rings = taught_by_peers(rings)
        if incident is None:
            named = rings_incident(rings)
        else:
            named = incident if len(by_run) == 1 else f"{incident}-{(run or 'norun')[-8:]}"
        config.validate_partition_value("incident", named)
        tables = [
            ring_table(
                past_gaps(contents),
                job=config.job_name(job) if job or not contents.job else contents.job,
                incident=named,
                # nobody dumped these buffers: when their ranks stopped is unknown, which
                # the analysis reads as past every timeout. The time of the import would
                # make each import's rows differ, and say nothing about the ranks
                dump_time_ns=None,
                members_as_dictionary=True,  # write_rows keeps large groups' lists once
            )
            for contents in rings
        ]
        table = pa.concat_tables(tables)
        write_rows(table, target)  # replaces the rank files an earlier import wrote
        result.incidents[named] = (len(tables), len(table))
        running = [contents.rank for contents in rings if _still_running(contents)]
        if running:
            # a running rank's ring holds what torch's FR had at its last read, and its
            # peers' were read at other moments: ranks caught at different points of a
            # running loop are no hang (the analysis reads a snapshot so)
            job_name = tables[0].column("job")[0].as_py() if len(table) else config.job_name(job)
            mark_snapshot(target, job_name, named)
            result.running[named] = running
    return result


def _still_running(contents: RingContents) -> bool:
    """Whether the ring's owner holds it still (alive; its record has no end yet)."""
    if contents.ended is not None:
        return False
    with adopted(contents.base) as free:
        return not free


def rings_incident(rings: list[RingContents]) -> str:
    """A stable id for one run's rings: ``<UTC time of their newest entry>-<run>-rings-<hash>``.

    The hash covers what tells one ring's contents from another's without reading every
    slot: each ring's job, run, rank, owner (pid, host), creation time, and how far it
    got (its records, first and last, and the newest time written). Reading the same
    files again gives the same id, wherever they were copied; another run, another set
    of ranks or a ring written further gives another.
    """
    facts = []
    for contents in rings:
        slots = contents.slots
        latest = max(
            (slot[index] for slot in slots for index in _TIMES), default=contents.created_ns
        )
        first, last = (slots[0][0], slots[-1][0]) if slots else (-1, -1)
        facts.append(
            (
                contents.rank,
                contents.job or "",
                contents.run or "",
                contents.pid or 0,
                contents.host or "",
                contents.created_ns,
                len(slots),
                first,
                last,
                latest,
            )
        )
    facts.sort()  # in the same order whatever order the files were found in
    newest = max(fact[-1] for fact in facts)
    digest = hashlib.sha256(repr(facts).encode())
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(newest // 1_000_000_000))
    run = rings[0].run
    run_part = f"{run[-RUN_PART_LENGTH:].strip('-.')}-" if run else ""
    return f"{stamp}-{run_part}rings-{digest.hexdigest()[:10]}"
