"""Snapshots of a running job, read as such.

A snapshot is taken while training runs (``fr-otel snapshot``, ``SIGUSR2`` or the trigger
FIFO: the recorder names those incidents ``...-operator`` and ``...-signal``; the
Collector's file archive of a continuous-mode job, imported back, is one too and its
manifest says so). Every rank copies its buffer at a slightly different moment of a
running loop, so one rank has issued the next all_reduce and its peer has not yet: read
as a hang, that is a ``missing_rank``. In a snapshot, work still in flight is work in
progress, unless it has been pending for ``STALL_NS`` (or half its timeout): then the
job was stuck when the snapshot was taken, and the snapshot is read as any incident.

Otherwise each group is read up to its *frontier*, the last collective every member with
a dump had issued: later collectives, and point-to-point ops still waiting for their
peer, are set aside, and what is left counts as done. A divergence within the frontier
(a collective issued with other sizes, a skipped one) is still found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from fr_otel.analysis.sqlfiles import query_file, run_file
from fr_otel.archive.manifest import Manifest

SNAPSHOT_REASONS = ("operator", "signal", "live_check")
"""The recorder's incident reasons (the id's last part) for a snapshot of a running job:
one an operator asked for, or the live check for its verdict."""

STALL_NS = 30_000_000_000
"""Work pending this long when the snapshot was taken means the job was stuck: a step of
a healthy job keeps nothing in flight for that long."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SnapshotReading:
    """How a snapshot was read."""

    stalled: bool
    """Work had been pending past the stall threshold: read as a hang."""
    set_aside: int
    """Entries past their group's frontier (or unpaired point-to-point ops) not judged."""

    def to_dict(self) -> dict[str, Any]:
        return {"stalled": self.stalled, "entries_in_flight_set_aside": self.set_aside}


def is_snapshot(incident: str, manifest: Manifest | None) -> bool:
    """Whether an incident is a snapshot of a running job (see the module's docstring)."""
    if incident.endswith(tuple(f"-{reason}" for reason in SNAPSHOT_REASONS)):
        return True
    return bool(manifest is not None and manifest.snapshot)


def read_snapshot(connection: duckdb.DuckDBPyConnection) -> SnapshotReading:
    """Settle the entries table ``e`` of a snapshot (see the module's docstring)."""
    row = query_file(connection, "snapshot_stalled.sql", {"stall_ns": STALL_NS}).fetchone()
    if row and row[0]:
        return SnapshotReading(stalled=True, set_aside=0)
    before = connection.execute("SELECT count(*) FROM e").fetchone()
    # sets aside what is past each group's frontier and counts the rest as done
    run_file(connection, "snapshot_frontier.sql", {})
    after = connection.execute("SELECT count(*) FROM e").fetchone()
    set_aside = (before[0] if before else 0) - (after[0] if after else 0)
    return SnapshotReading(stalled=False, set_aside=set_aside)
