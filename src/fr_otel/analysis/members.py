"""Group members the dumps do not show: completing gloo's inferred memberships.

gloo's dumps carry no group membership, so the importer infers it from which ranks hold
entries of each group (``pg_ranks_inferred``). A member whose dump is missing (or holds no
entry) then drops out of its groups: ``front_group`` of ranks 0-2 without rank 0's dump
reads as ranks 1 and 2, and every rule that counts members (an all_gather's output is
its input times the group size) would blame the ranks that are there.

The collectives' own shapes say how many members a group has: an all_gather's output
holds one input per member, a reduce_scatter's input one output per member, a scatter's
source holds one chunk per member, a gather's destination one input per member. Where
that count is larger than the members seen, the extra members are ranks without a dump:

- the default group spans ranks 0 to its size - 1, so they are named;
- in another group they are named when exactly that many ranks lack a dump; otherwise
  the group keeps ``unknown_members`` and no rule that needs its size is checked.

Replicas say it too: the groups of one DeviceMesh dimension (one description, such as
``mesh_tp``) all have the same size, so a ``mesh_tp`` group seen with one member where
the others have two misses one. Global ranks run from 0 to the world size - 1, so a rank
below the highest one seen that left no entry is one of the ranks without a dump.
"""

from __future__ import annotations

import duckdb

DEFAULT_PG_DESC = "default_pg"
ANONYMOUS_DESCS = ("", "undefined")
"""Undescribed groups of one size need not be replicas of each other."""

_IMPLIED_SIZES = """
WITH implied AS (
    SELECT gid,
        CASE
            WHEN list_contains($all_gather_ops, op) AND in_tensors = 1 AND out_tensors > 1
                THEN out_tensors
            WHEN list_contains($all_gather_ops, op) AND in_numel > 0
                 AND out_numel % in_numel = 0 THEN out_numel // in_numel
            WHEN list_contains($reduce_scatter_ops, op) AND out_tensors = 1 AND in_tensors > 1
                THEN in_tensors
            WHEN list_contains($reduce_scatter_ops, op) AND out_numel > 0
                 AND in_numel % out_numel = 0 THEN in_numel // out_numel
            WHEN op = 'scatter' AND in_numel > 0 AND out_numel > 0
                 AND in_numel % out_numel = 0 THEN in_numel // out_numel
            WHEN op = 'gather' AND in_numel > 0 AND out_numel > 0
                 AND out_numel % in_numel = 0 THEN out_numel // in_numel
        END AS size
    FROM e
    WHERE NOT p2p
)
SELECT gid, mode(size) FROM implied WHERE size > 1 GROUP BY gid
"""


_MATCHING = """
-- undescribed groups whose collectives agree, sequence number for sequence number, with
-- another undescribed group's: replicas created together (new_subgroups_by_enumeration)
WITH sigs AS (
    SELECT e.gid, e.seq, min(e.h) AS h
    FROM e JOIN groups g USING (gid)
    WHERE NOT e.p2p AND e.op <> 'coalesced' AND coalesce(g.pg_desc, '') IN ('', 'undefined')
    GROUP BY e.gid, e.seq
)
SELECT a.gid, b.gid
FROM sigs a JOIN sigs b ON a.seq = b.seq AND a.gid <> b.gid
GROUP BY a.gid, b.gid
HAVING count(*) >= 2 AND bool_and(a.h = b.h)
"""


def complete_groups(connection: duckdb.DuckDBPyConnection, params: dict[str, object]) -> None:
    """Add the members that inferred groups' shapes prove and no dump shows; set
    ``unknown_members`` where they cannot be named. Runs after ``01_entries``."""
    connection.execute(
        "ALTER TABLE groups ADD COLUMN IF NOT EXISTS unknown_members INTEGER DEFAULT 0"
    )
    rows = connection.execute(
        "SELECT gid, pg_desc, members FROM groups WHERE inferred ORDER BY gid"
    ).fetchall()
    if not rows:
        return
    implied = dict(
        connection.execute(
            _IMPLIED_SIZES,
            {k: params[k] for k in ("all_gather_ops", "reduce_scatter_ops")},
        ).fetchall()
    )
    with_entries = {r for (r,) in connection.execute("SELECT rank FROM dumped").fetchall()}
    all_groups = connection.execute("SELECT gid, pg_desc, members FROM groups").fetchall()
    members_of = {gid: list(members or ()) for gid, _, members in all_groups}
    desc_of = {gid: desc for gid, desc, _ in all_groups}
    matching: dict[int, list[int]] = {}
    for a, b in connection.execute(_MATCHING).fetchall():
        matching.setdefault(a, []).append(b)
    updates: dict[int, tuple[list[int], int]] = {}
    # the default group first: the ranks it adds are candidates for the other groups
    ordered = sorted(rows, key=lambda row: (row[1] != DEFAULT_PG_DESC, row[0]))
    for gid, desc, _ in ordered:
        members = members_of[gid]
        size = implied.get(gid) or 0
        if desc and desc not in ANONYMOUS_DESCS and desc != DEFAULT_PG_DESC:
            replicas = [len(m) for g, m in members_of.items() if g != gid and desc_of[g] == desc]
        else:
            replicas = [len(members_of[g]) for g in matching.get(gid, ())]
        size = max(size, *replicas) if replicas else size
        if size <= len(members):
            continue
        gap = size - len(members)
        if desc == DEFAULT_PG_DESC:
            top = max(members, default=-1)
            updates[gid] = (sorted({*members, *range(top + 1, top + 1 + gap)}), 0)
            members_of[gid] = updates[gid][0]
            continue
        known = {r for ranks in members_of.values() for r in ranks} | with_entries
        world = set(range(max(known, default=-1) + 1))
        # a rank already in a replica of this group is not in this one
        if desc and desc not in ANONYMOUS_DESCS:
            taken = {r for g, m in members_of.items() if g != gid and desc_of[g] == desc for r in m}
        else:
            taken = {r for g in matching.get(gid, ()) for r in members_of[g]}
        silent = sorted(world - with_entries - set(members) - taken)
        if not silent:
            # no rank below the highest seen is missing: the members lie above it (the
            # smallest world that holds them)
            top = max(world, default=-1)
            silent = list(range(top + 1, top + 1 + gap))
        if len(silent) == gap:
            updates[gid] = (sorted({*members, *silent}), 0)
            members_of[gid] = updates[gid][0]
        else:
            updates[gid] = (members, gap)
    for gid, (members, unknown) in updates.items():
        connection.execute(
            "UPDATE groups SET members = ?, unknown_members = ? WHERE gid = ?",
            [members, unknown, gid],
        )
