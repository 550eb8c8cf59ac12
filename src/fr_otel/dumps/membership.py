"""Process-group membership across a fleet of dumps.

NCCL dumps carry each group's global ranks in ``pg_config``. gloo dumps do not (every
group is recorded under the key ``''``), and any dump may miss a
group that never created a communicator. For those groups membership is inferred from
which ranks hold entries of that group name and marked ``pg_ranks_inferred``: a member
that never issued any collective of the group, or whose dump is missing, cannot be seen.
The default group is the exception: it spans every rank, so its inferred membership is
every rank from 0 to the highest rank seen anywhere, or implied by the shapes of an
all_gather over it (so that a missing last rank still shows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa

from fr_otel.dumps.parse import GroupSeen, global_peer, split_profiling_name

DEFAULT_PG_DESC = "default_pg"


@dataclass(frozen=True, kw_only=True, slots=True)
class Membership:
    """One process group's members as the fleet shows them."""

    name: str
    desc: str | None
    ranks: tuple[int, ...]
    inferred: bool


def resolve_memberships(
    groups_by_rank: Mapping[int, Mapping[str, GroupSeen]],
) -> list[Membership]:
    """Combine every rank's view of its groups into the job's groups: one per group
    name, or one per replica where disjoint groups share a name.

    A ``pg_config`` list read from the dumps wins. Where ranks list different members
    under one name, and each list is disjoint from the others and listed only by its own
    members, the name is shared by replicas (torchft's replica groups: created apart and
    numbered alike), each a group of its own. Other disagreements
    are mistakes: the list most ranks recorded wins. Groups without a list are inferred
    (see the module docstring).
    """
    holders: dict[str, set[int]] = {}
    size_hints: dict[str, int] = {}
    # name -> each member list recorded under it -> the ranks that recorded it
    configured: dict[str, dict[tuple[int, ...], set[int]]] = {}
    descs: dict[str, str | None] = {}
    for rank, groups in groups_by_rank.items():
        for name, seen in groups.items():
            if seen.entries:
                holders.setdefault(name, set()).add(rank)
            if seen.ranks:
                configured.setdefault(name, {}).setdefault(tuple(seen.ranks), set()).add(rank)
            if descs.get(name) is None:
                descs[name] = seen.desc
            if seen.size_hint:
                size_hints[name] = max(size_hints.get(name, 0), seen.size_hint)
    all_ranks = set(groups_by_rank)
    for name, hint in size_hints.items():
        if descs.get(name) == DEFAULT_PG_DESC:
            all_ranks.update(range(hint))
    for recorded_lists in configured.values():
        for ranks in recorded_lists:
            all_ranks.update(ranks)
    top = max(all_ranks) if all_ranks else -1

    result: list[Membership] = []
    for name in sorted(set(holders) | set(configured)):
        desc = descs.get(name)
        if name in configured:
            recorded = configured[name]
            # most recorded first (ties: first seen first)
            lists = sorted(recorded, key=lambda ranks: -len(recorded[ranks]))
            if not _replicas(recorded):
                lists = lists[:1]
            result.extend(
                Membership(name=name, desc=desc, ranks=ranks, inferred=False) for ranks in lists
            )
            continue
        members = set(holders.get(name, ()))
        if desc == DEFAULT_PG_DESC:
            members |= set(range(top + 1))
        result.append(Membership(name=name, desc=desc, ranks=tuple(sorted(members)), inferred=True))
    return result


def _replicas(recorded: Mapping[tuple[int, ...], set[int]]) -> bool:
    """Whether the member lists ``recorded`` under one name (each with the ranks that
    recorded it) are replicas: no rank in two of them, each recorded only by its own
    members."""
    if len(recorded) < 2:
        return False
    seen: set[int] = set()
    for ranks, recorders in recorded.items():
        members = set(ranks)
        if members & seen or not recorders <= members:
            return False
        seen |= members
    return True


def expected_ranks(memberships: Iterable[Membership]) -> set[int]:
    """Every rank some group says should exist."""
    ranks: set[int] = set()
    for membership in memberships:
        ranks.update(membership.ranks)
    return ranks


def needs_membership(groups: Mapping[str, GroupSeen]) -> bool:
    """Whether some rows of a dump lack ``pg_ranks``: those of a group without members
    (``ParsedDump.groups`` are its rows' groups, whether or not its table has the column)."""
    return any(group.ranks is None for group in groups.values())


def apply_memberships(table: pa.Table, memberships: Iterable[Membership]) -> pa.Table:
    """Fill ``pg_ranks`` (and the p2p ``peer`` that depends on it) where the dump had none:
    with its group's members, of the replica holding the row's rank where replicas share
    the group's name."""
    by_name: dict[str, list[Membership]] = {}
    for membership in memberships:
        by_name.setdefault(membership.name, []).append(membership)
    rows_rank = table.column("rank").to_pylist()
    names = table.column("pg_name").to_pylist()
    ranks = table.column("pg_ranks").to_pylist()
    inferred = table.column("pg_ranks_inferred").to_pylist()
    peers = table.column("peer").to_pylist()
    profiling = table.column("profiling_name").to_pylist()
    for i, name in enumerate(names):
        if ranks[i] is not None:
            continue
        candidates = by_name.get(name)
        if not candidates:
            continue
        membership = next((m for m in candidates if rows_rank[i] in m.ranks), candidates[0])
        ranks[i] = list(membership.ranks)
        inferred[i] = membership.inferred
        if peers[i] is None and profiling[i]:
            peers[i] = global_peer(ranks[i], split_profiling_name(profiling[i])[2])
    schema = table.schema
    for column, values in (
        ("pg_ranks", ranks),
        ("pg_ranks_inferred", inferred),
        ("peer", peers),
    ):
        index = schema.get_field_index(column)
        table = table.set_column(
            index, schema.field(index), pa.array(values, type=schema.field(index).type)
        )
    return table
