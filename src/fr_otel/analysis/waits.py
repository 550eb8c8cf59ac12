"""Findings about waiting: stuck work, ordering deadlocks across groups, lone send/recv.

Each rank's stream runs in order, so the oldest unfinished op on a rank (its *head*) is
what it is blocked on. From the heads:

- a collective that is the head of every member, issued alike by all, and pending past
  its timeout is ``stuck_in_flight``: the members that never started it are the culprits
  (their GPU stream is stuck); when all started, the network is, and no rank is blamed;
- ranks waiting on each other in a cycle that spans groups, each having issued what the
  others wait for, only later in its stream, are one ``cross_pg_deadlock``;
- a pending send or recv whose peer never posted the other half is ``p2p_unmatched``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from fr_otel.analysis.findings import Finding, GroupRef
from fr_otel.analysis.stacks import call_site, trimmed


@dataclass(frozen=True, kw_only=True, slots=True)
class Head:
    rank: int
    gkey: str
    seq: int | None
    p2p: bool
    op: str
    peer: int | None
    state: str | None
    started: bool
    created_ns: int | None
    frames: list[dict[str, Any]] | None
    timeout_ms: int | None
    dump_time_ns: int | None

    @property
    def slot(self) -> tuple[str, int | None, bool]:
        return (self.gkey, self.seq, self.p2p)

    def overdue(self) -> bool:
        """Pending longer than its timeout when the dump was taken (unknown counts as yes)."""
        if self.created_ns is None or self.dump_time_ns is None or not self.timeout_ms:
            return True
        return self.dump_time_ns - self.created_ns >= self.timeout_ms * 1_000_000


def load_heads(connection: duckdb.DuckDBPyConnection) -> dict[int, Head]:
    heads: dict[int, Head] = {}
    for rank, head in connection.execute("SELECT rank, head FROM heads").fetchall():
        heads[rank] = Head(
            rank=rank,
            gkey=head["gkey"],
            seq=head["seq"],
            p2p=head["p2p"],
            op=head["op"],
            peer=head["peer"],
            state=head["state"],
            started=bool(head["started"]),
            created_ns=head["time_created_ns"],
            frames=head["frames"],
            timeout_ms=head["timeout_ms"],
            dump_time_ns=head["dump_time_ns"],
        )
    return heads


def held_by(heads: dict[int, Head], gkey: str, seq: int | None) -> frozenset[int]:
    """Ranks blocked in group ``gkey`` at or after collective ``seq``."""
    return frozenset(
        h.rank
        for h in heads.values()
        if h.gkey == gkey and (seq is None or h.p2p or (h.seq is not None and h.seq >= seq))
    )


def stuck_in_flight(
    connection: duckdb.DuckDBPyConnection,
    heads: dict[int, Head],
    groups: dict[str, GroupRef],
    dumped: set[int],
    timing_known: bool,
) -> list[Finding]:
    findings: list[Finding] = []
    by_slot: dict[tuple[str, int | None, bool], list[Head]] = {}
    for head in heads.values():
        if not head.p2p:
            by_slot.setdefault(head.slot, []).append(head)
    for (gkey, seq, _), waiting in sorted(by_slot.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        group = groups[gkey]
        members = [m for m in (group.ranks or ()) if m in dumped]
        if {h.rank for h in waiting} != set(members) or not all(h.overdue() for h in waiting):
            continue
        summary_row = connection.execute(
            "SELECT absent, signatures FROM slot_summary WHERE gkey = ? AND seq = ?", [gkey, seq]
        ).fetchone()
        if summary_row is None or summary_row[0] or summary_row[1] != 1:
            continue  # not issued alike by everyone: the divergence findings cover it
        unstarted = sorted(h.rank for h in waiting if not h.started)
        started = sorted(h.rank for h in waiting if h.started)
        example = min(waiting, key=lambda h: h.rank)
        if timing_known and unstarted and started:
            culprits = unstarted
            reason = (
                f"rank{'s' if len(unstarted) > 1 else ''} {', '.join(map(str, unstarted))} never"
                f" started it while {len(started)} peer(s) did: their GPU stream is stuck"
                " behind earlier work"
            )
        elif timing_known and not unstarted:
            culprits = []
            reason = "every member started it and none completed: suspect the network or NCCL"
        else:
            culprits = []
            reason = (
                "no member started it"
                if timing_known
                else "the dumps cannot tell started from scheduled (no timing), so no rank is blamed"
            )
        findings.append(
            Finding(
                kind="stuck_in_flight",
                group=group,
                collective_seq_id=seq,
                op=example.op,
                culprit_ranks=culprits,
                summary=f"{example.op} {group.label()} collective #{seq} never completed: {reason}",
                evidence={
                    "started_ranks": started,
                    "unstarted_ranks": unstarted,
                    "timing_known": timing_known,
                    "call_site": call_site(example.frames),
                },
                frames={
                    "majority": trimmed(example.frames),
                    "majority_rank": example.rank,
                    "culprit": {
                        str(h.rank): trimmed(h.frames) for h in waiting if h.rank in culprits
                    },
                },
                time_ns=min((h.created_ns for h in waiting if h.created_ns), default=None),
            )
        )
    return findings


SlotKey = tuple[str, "int | None", bool]


def _slot_graph(heads: dict[int, Head], groups: dict[str, GroupRef]) -> dict[SlotKey, set[SlotKey]]:
    """Which head slot waits on which: A -> B when a rank A needs is blocked at B.

    Working on slots rather than ranks keeps the graph tiny however many ranks wait.
    """
    graph: dict[SlotKey, set[SlotKey]] = {}
    for head in heads.values():
        edges = graph.setdefault(head.slot, set())
        if head.p2p:
            peer = heads.get(head.peer) if head.peer is not None else None
            matching = peer is not None and peer.p2p and peer.gkey == head.gkey and peer.peer == head.rank
            if peer is not None and not matching:
                edges.add(peer.slot)
            continue
        for member in groups[head.gkey].ranks or ():
            other = heads.get(member)
            if other is not None and other.slot != head.slot:
                edges.add(other.slot)
    return graph


def _strongly_connected(graph: dict[SlotKey, set[SlotKey]]) -> list[list[SlotKey]]:
    """Tarjan's algorithm, iterative."""
    index: dict[SlotKey, int] = {}
    low: dict[SlotKey, int] = {}
    on_stack: set[SlotKey] = set()
    stack: list[SlotKey] = []
    components: list[list[SlotKey]] = []

    def visit(node: SlotKey) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)

    for root in sorted(graph, key=repr):
        if root in index:
            continue
        visit(root)
        work = [(root, iter(sorted(graph.get(root, ()), key=repr)))]
        while work:
            node, neighbours = work[-1]
            for nxt in neighbours:
                if nxt not in index:
                    visit(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ()), key=repr))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component: list[SlotKey] = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    components.append(component)
    return components


def _order_minority(connection: duckdb.DuckDBPyConnection, slots: list[SlotKey]) -> list[int]:
    """Ranks that issued two of the deadlocked collectives in the minority's order."""
    positions: dict[SlotKey, dict[int, int]] = {}
    for slot in slots:
        gkey, seq, _ = slot
        positions[slot] = dict(
            connection.execute(
                "SELECT rank, first_record FROM slots WHERE gkey = ? AND seq = ?", [gkey, seq]
            ).fetchall()
        )
    culprits: set[int] = set()
    for i, a in enumerate(slots):
        for b in slots[i + 1 :]:
            both = positions[a].keys() & positions[b].keys()
            a_first = {r for r in both if positions[a][r] < positions[b][r]}
            b_first = both - a_first
            if len(a_first) != len(b_first):
                culprits |= min(a_first, b_first, key=len)
    return sorted(culprits)


def cross_pg_deadlocks(
    connection: duckdb.DuckDBPyConnection, heads: dict[int, Head], groups: dict[str, GroupRef]
) -> list[Finding]:
    findings: list[Finding] = []
    for slots in _strongly_connected(_slot_graph(heads, groups)):
        if len(slots) < 2 or len({gkey for gkey, _, _ in slots}) < 2:
            continue
        if any(p2p for _, _, p2p in slots):
            continue
        # An ordering deadlock: everyone waited on has issued that collective alike, only
        # behind something else in its stream. (A rank that skipped or changed it is a
        # divergence finding instead.)
        issued_alike = True
        for gkey, seq, _ in slots:
            row = connection.execute(
                "SELECT absent, signatures FROM slot_summary WHERE gkey = ? AND seq = ?",
                [gkey, seq],
            ).fetchone()
            if row is None or row[0] or row[1] != 1:
                issued_alike = False
        if not issued_alike:
            continue
        component = sorted(r for r, h in heads.items() if h.slot in slots)
        culprits = _order_minority(connection, slots)
        blocked = {
            f"{groups[g].label()} #{s}": sorted(r for r in component if heads[r].slot == (g, s, p))
            for g, s, p in sorted(slots, key=lambda x: (x[0], x[1] or 0))
        }
        first = min(component, key=lambda r: (heads[r].created_ns or 0, r))
        example = heads[culprits[0]] if culprits else heads[first]
        description = "; ".join(f"ranks {ranks} blocked in {where}" for where, ranks in blocked.items())
        blame = (
            f" rank{'s' if len(culprits) > 1 else ''} {', '.join(map(str, culprits))} issued"
            " them in the opposite order to their peers"
            if culprits
            else " no order has a majority"
        )
        findings.append(
            Finding(
                kind="cross_pg_deadlock",
                group=groups[example.gkey],
                collective_seq_id=example.seq,
                op=example.op,
                culprit_ranks=culprits,
                summary=f"ranks wait on each other across {len(blocked)} groups ({description});{blame}",
                evidence={
                    "blocked": blocked,
                    "call_sites": {str(r): call_site(heads[r].frames) for r in culprits or [first]},
                },
                frames={
                    "culprit": {str(r): trimmed(heads[r].frames) for r in culprits},
                    "majority": trimmed(heads[first].frames),
                    "majority_rank": first,
                },
                time_ns=min(
                    (heads[r].created_ns for r in component if heads[r].created_ns), default=None
                ),
                held_ranks=frozenset(component),
            )
        )
    return findings


def p2p_unmatched(
    connection: duckdb.DuckDBPyConnection, groups: dict[str, GroupRef]
) -> list[Finding]:
    rows = connection.execute(
        "SELECT rank, gkey, op, peer, p2p_seq_id, input_sizes, output_sizes, time_created_ns, frames"
        " FROM p2p_pending WHERE peer_dumped AND NOT peer_posted ORDER BY gkey, rank, record_id"
    ).fetchall()
    findings: dict[tuple[str, int, int], Finding] = {}
    for rank, gkey, op, peer, p2p_seq, ins, outs, created, frames in rows:
        key = (gkey, rank, peer)
        if key in findings:
            continue
        other = "recv" if op == "send" else "send"
        findings[key] = Finding(
            kind="p2p_unmatched",
            group=groups[gkey],
            collective_seq_id=None,
            op=op,
            culprit_ranks=[peer],
            summary=(
                f"rank {rank}'s {op} {'to' if op == 'send' else 'from'} rank {peer}"
                f" ({groups[gkey].label()}) has no matching {other}: rank {peer} never posted it"
            ),
            evidence={
                "waiting_rank": rank,
                "p2p_seq_id": p2p_seq,
                "sizes": ins if op == "send" else outs,
                "call_site": call_site(frames),
            },
            frames={"majority": trimmed(frames), "majority_rank": rank, "culprit": {}},
            time_ns=created,
            waiting_ranks=frozenset({peer}),
        )
    return list(findings.values())
