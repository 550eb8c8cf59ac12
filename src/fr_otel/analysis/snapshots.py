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

from fr_otel.archive.manifest import Manifest

SNAPSHOT_REASONS = ("operator", "signal")
"""The recorder's incident reasons (the id's last part) for a snapshot an operator asked."""

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


_STALLED = """
SELECT count(*) FROM e
WHERE NOT done AND op <> 'coalesced' AND dump_time_ns IS NOT NULL
  AND time_created_ns IS NOT NULL
  AND dump_time_ns - time_created_ns
      >= least($stall_ns, coalesce(timeout_ms, $stall_ns // 500000) * 500000)
"""

_FRONTIER = """
CREATE OR REPLACE TEMP TABLE snapshot_frontier AS
SELECT g.gid, min(coalesce(w.max_seq, -1)) AS frontier
FROM groups g, unnest(g.members) AS m(rank)
JOIN dumped d ON d.rank = m.rank
LEFT JOIN (SELECT gid, rank, max(seq) AS max_seq FROM e
           WHERE NOT p2p AND op <> 'coalesced' GROUP BY gid, rank) w
    ON w.gid = g.gid AND w.rank = m.rank
-- a member whose buffer no longer reaches this group tells nothing about its frontier
WHERE w.max_seq IS NOT NULL OR d.first_record = 0
GROUP BY g.gid
"""

_SET_ASIDE = """
DELETE FROM e
WHERE (p2p AND NOT done)
   OR (NOT p2p AND seq > (SELECT f.frontier FROM snapshot_frontier f WHERE f.gid = e.gid))
"""


def read_snapshot(connection: duckdb.DuckDBPyConnection) -> SnapshotReading:
    """Settle the entries table ``e`` of a snapshot (see the module's docstring)."""
    row = connection.execute(_STALLED, {"stall_ns": STALL_NS}).fetchone()
    if row and row[0]:
        return SnapshotReading(stalled=True, set_aside=0)
    before = connection.execute("SELECT count(*) FROM e").fetchone()
    connection.execute(_FRONTIER)
    connection.execute(_SET_ASIDE)
    after = connection.execute("SELECT count(*) FROM e").fetchone()
    # what is left was in progress when the snapshot was taken, never stuck
    connection.execute("UPDATE e SET done = true WHERE NOT done")
    set_aside = (before[0] if before else 0) - (after[0] if after else 0)
    return SnapshotReading(stalled=False, set_aside=set_aside)
