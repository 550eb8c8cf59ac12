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

from dataclasses import dataclass, field

import duckdb

from fr_otel.analysis.findings import Finding, FrameRef, GroupRef

SlotKey = tuple[int, "int | None", bool]
"""(group id, collective seq (the rank itself for p2p), is p2p): where a rank is blocked."""
Node = tuple[object, ...]
"""A node of the wait graph: a SlotKey, or ("idle", rank) for a rank with nothing pending."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Head:
    rank: int
    gid: int
    seq: int | None
    p2p: bool
    op: str
    peer: int | None
    started: bool
    created_ns: int | None
    record_id: int
    site: int | None
    """Hash of the call site (the text is fetched for the findings that show it)."""
    timeout_ms: int | None
    dump_time_ns: int | None
    retired: bool = False
    """gloo shows it retired, as it does a failed collective: unfinished by inference."""

    @property
    def ref(self) -> FrameRef:
        return (self.rank, self.record_id)

    @property
    def slot(self) -> tuple[int, int | None, bool]:
        # every rank's pending send/recv is its own wait (they pair by peer, not by group)
        return (self.gid, self.rank if self.p2p else self.seq, self.p2p)

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
            gid=head["gid"],
            seq=head["seq"],
            p2p=head["p2p"],
            op=head["op"],
            peer=head["peer"],
            started=bool(head["started"]),
            created_ns=head["time_created_ns"],
            record_id=head["record_id"],
            site=head["site"],
            timeout_ms=head["timeout_ms"],
            dump_time_ns=head["dump_time_ns"],
            retired=bool(head["retired_only"]),
        )
    return heads


@dataclass(kw_only=True)
class WaitGraph:
    """Who each blocked op waits on: the members (or the peer) that have not done it and
    are not at it themselves. A rank stuck in host code has no unfinished op at all, yet
    is waited on."""

    heads: dict[int, Head]
    by_slot: dict[SlotKey, set[int]]
    needs: dict[SlotKey, set[int]]
    silent_needs: dict[SlotKey, set[int]] = field(default_factory=dict)
    """Slots that wait on nothing a dump shows, but have members (or a peer) without a
    dump: those silent ranks are the only ones that could complete them."""

    @classmethod
    def build(
        cls,
        connection: duckdb.DuckDBPyConnection,
        heads: dict[int, Head],
        groups: dict[int, GroupRef],
        dumped: set[int],
    ) -> WaitGraph:
        by_slot: dict[SlotKey, set[int]] = {}
        for head in heads.values():
            by_slot.setdefault(head.slot, set()).add(head.rank)
        done: dict[tuple[int, int], set[int]] = {
            (gid, seq): set(ranks)
            for gid, seq, ranks in connection.execute(
                "SELECT s.gid, s.seq, list(s.rank) FROM slots s"
                " JOIN (SELECT DISTINCT head.gid AS gid, head.seq AS seq FROM heads"
                "       WHERE NOT head.p2p) h USING (gid, seq)"
                " WHERE s.done GROUP BY ALL"
            ).fetchall()
        }
        needs: dict[SlotKey, set[int]] = {}
        silent_needs: dict[SlotKey, set[int]] = {}
        for slot, ranks in by_slot.items():
            gid, seq, p2p = slot
            if p2p:
                wanted: set[int] = set()
                for rank in ranks:
                    head = heads[rank]
                    peer = heads.get(head.peer) if head.peer is not None else None
                    matching = (
                        peer is not None
                        and peer.p2p
                        and peer.gid == gid
                        and peer.peer == rank
                        and {peer.op, head.op} == {"send", "recv"}
                    )
                    if head.peer is not None and head.peer in dumped and not matching:
                        wanted.add(head.peer)
                    elif head.peer is not None and head.peer not in dumped:
                        silent_needs.setdefault(slot, set()).add(head.peer)
                needs[slot] = wanted
            else:
                # a rank without a dump is unknown: never seen absent, never blamed on
                # evidence; it is waited on only where nothing a dump shows is
                members = set(groups[gid].ranks or ()) & dumped
                needs[slot] = members - done.get((gid, seq or 0), set()) - ranks
                silent = set(groups[gid].ranks or ()) - dumped
                if silent and not needs[slot]:
                    silent_needs[slot] = silent
        return cls(heads=heads, by_slot=by_slot, needs=needs, silent_needs=silent_needs)

    def sinks(self) -> list[frozenset[int]]:
        """The ranks of each jam that waits on nothing outside itself.

        Every blocked rank ends up waiting on one of these: they are where root causes
        are. A rank that is needed but has nothing pending (stuck in host code) is a
        sink of its own.
        """
        idle = {m for needed in self.needs.values() for m in needed if m not in self.heads}
        graph: dict[Node, set[Node]] = {}
        for slot, needed in self.needs.items():
            graph[slot] = {self.heads[m].slot if m in self.heads else ("idle", m) for m in needed}
            graph[slot] |= {("silent", m) for m in self.silent_needs.get(slot, ())}
        for rank in idle:
            graph[("idle", rank)] = set()
        for silent in self.silent_needs.values():
            for rank in silent:
                graph[("silent", rank)] = set()
        sinks = []
        for component in _strongly_connected(graph):
            members = set(component)
            if any(graph[node] - members for node in component):
                continue
            ranks: set[int] = set()
            for node in component:
                item = node[1]
                if node[0] in ("idle", "silent") and isinstance(item, int):
                    ranks.add(item)
                else:
                    ranks |= self.by_slot.get(node, set())  # type: ignore[arg-type]
            sinks.append(frozenset(ranks))
        return sinks

    def blocked_behind(self, held: frozenset[int]) -> frozenset[int]:
        """``held`` plus every rank that transitively waits on one of them."""
        blocked = set(held)
        changed = True
        while changed:
            changed = False
            for slot, ranks in self.by_slot.items():
                needed = self.needs[slot] | self.silent_needs.get(slot, set())
                if not ranks <= blocked and needed & blocked:
                    blocked |= ranks
                    changed = True
        return frozenset(blocked)


def held_by(heads: dict[int, Head], gid: int, seq: int | None) -> frozenset[int]:
    """Ranks blocked in group ``gid`` at or after collective ``seq``."""
    return frozenset(
        h.rank
        for h in heads.values()
        if h.gid == gid and (seq is None or h.p2p or (h.seq is not None and h.seq >= seq))
    )


def stuck_in_flight(
    connection: duckdb.DuckDBPyConnection,
    heads: dict[int, Head],
    groups: dict[int, GroupRef],
    dumped: set[int],
    timing_known: bool,
) -> list[Finding]:
    findings: list[Finding] = []
    by_slot: dict[tuple[int, int | None, bool], list[Head]] = {}
    for head in heads.values():
        if not head.p2p:
            by_slot.setdefault(head.slot, []).append(head)
    for (gid, seq, _), waiting in sorted(by_slot.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        group = groups[gid]
        members = [m for m in (group.ranks or ()) if m in dumped]
        if {h.rank for h in waiting} != set(members) or not all(h.overdue() for h in waiting):
            continue
        summary_row = connection.execute(
            "SELECT absent, signatures FROM slot_summary WHERE gid = ? AND seq = ?", [gid, seq]
        ).fetchone()
        if summary_row is None or summary_row[0] or summary_row[1] != 1:
            continue  # not issued alike by everyone: the divergence findings cover it
        unstarted = sorted(h.rank for h in waiting if not h.started)
        started = sorted(h.rank for h in waiting if h.started)
        example = min(waiting, key=lambda h: h.rank)
        if set(group.ranks or ()) - dumped and not (timing_known and unstarted and started):
            continue  # members without a dump could complete it: a silent_rank finding
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
                else "the dumps cannot tell started from scheduled (no timing): no rank is blamed"
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
                    "entry": example.ref,
                },
                frames={
                    "majority": example.ref,
                    "majority_rank": example.rank,
                    "culprit": {str(h.rank): h.ref for h in waiting if h.rank in culprits},
                },
                time_ns=min((h.created_ns for h in waiting if h.created_ns), default=None),
            )
        )
    return findings


def _ranks_words(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


def _silent_finding(
    group: GroupRef,
    seq: int | None,
    waiting: list[Head],
    silent: list[int],
    timing_known: bool,
) -> Finding:
    """Every member with a dump waits in a collective (or a send/recv) that only members
    without one could complete: they are the suspects, on the evidence of their silence."""
    example = min(waiting, key=lambda h: h.rank)
    present = sorted(h.rank for h in waiting)
    where = (
        f"{example.op} {group.label()} collective #{seq}"
        if not example.p2p
        else f"{example.op} {'to' if example.op == 'send' else 'from'} rank {example.peer}"
        f" ({group.label()})"
    )
    retired = any(h.retired for h in waiting)
    finding = Finding(
        kind="silent_rank",
        group=group,
        collective_seq_id=None if example.p2p else seq,
        op=example.op,
        culprit_ranks=list(silent),
        summary="",
        evidence={
            "silent_ranks": list(silent),
            "present_ranks": present,
            "by_silence": True,
            "started_ranks": sorted(h.rank for h in waiting if h.started),
            "timing_known": timing_known,
            # gloo's dumps show a failed collective retired, like a completed one
            "retired_in_dumps": retired,
            "entry": example.ref,
        },
        frames={"majority": example.ref, "majority_rank": example.rank, "culprit": {}},
        time_ns=min((h.created_ns for h in waiting if h.created_ns), default=None),
        held_ranks=frozenset(present),
        absent_ranks=frozenset(silent),
    )
    finding.evidence["where"] = where
    finding.summary = silent_summary(finding)
    return finding


def silent_summary(finding: Finding) -> str:
    """The sentence of a ``silent_rank`` finding, as a suspect or as a consequence."""
    silent = list(finding.evidence["silent_ranks"])
    present = list(finding.evidence["present_ranks"])
    where = finding.evidence.get("where")
    who = _ranks_words(silent)
    if where is None:
        return (
            f"{who} left no dump (or one without entries) and the dumps present show no"
            f" problem: what {'they were' if len(silent) > 1 else 'it was'} doing is unknown,"
            " so the incident cannot be called healthy"
        )
    waits = (
        f"{'every member with a dump' if len(present) > 1 else 'the only member with a dump'}"
        f" ({_ranks_words(present)}) waits in {where}, which only {who} could complete"
    )
    if finding.evidence.get("retired_in_dumps"):
        waits += " (gloo shows it retired, as it does a collective that failed)"
    if finding.evidence.get("candidate_ranks"):
        suspects = ", ".join(map(str, finding.evidence["candidate_ranks"]))
        return f"{waits}; suspects: ranks {suspects}: {finding.evidence['reason']}"
    if (
        finding.evidence.get("timing_known")
        and present
        and finding.evidence.get("started_ranks") == present
    ):
        waits += " (every member with a dump started it: the network is a suspect too)"
    if finding.culprit_ranks:
        verb = "are the suspects" if len(silent) > 1 else "is the suspect"
        their = "their" if len(silent) > 1 else "its"
        return f"{waits}; {who} left no dump and {verb}: the evidence is {their} silence"
    if finding.evidence.get("same_silence"):
        return f"{waits}; the same silence as [{finding.consequence_of}]"
    return f"{waits}; {who} left no dump, and presumably waits behind [{finding.consequence_of}]"


def unexplained_silence(silent: list[int], group: GroupRef) -> Finding:
    """An incident with ranks that left no dump, where the dumps present show nothing
    wrong: not healthy, only unknown."""
    finding = Finding(
        kind="silent_rank",
        group=group,
        collective_seq_id=None,
        op=None,
        culprit_ranks=[],
        summary="",
        evidence={"silent_ranks": list(silent), "present_ranks": [], "by_silence": False},
        absent_ranks=frozenset(silent),
    )
    finding.summary = silent_summary(finding)
    return finding


def silent_ranks(
    graph: WaitGraph, groups: dict[int, GroupRef], timing_known: bool
) -> list[Finding]:
    """Collectives (and sends, receives) that wait on nothing a dump shows, but on members
    (or a peer) that left no dump, past their timeout."""
    findings = []
    for slot, silent in sorted(graph.silent_needs.items(), key=lambda kv: repr(kv[0])):
        gid, seq, p2p = slot
        waiting = [graph.heads[r] for r in sorted(graph.by_slot.get(slot, ()))]
        if p2p:
            waiting = [h for h in waiting if h.peer in silent]
        # not necessarily past its timeout: in an incident, the rank that lost its peer
        # often failed (and dumped) at once; the silent member is the only one it waits on
        if not waiting:
            continue
        findings.append(_silent_finding(groups[gid], seq, waiting, sorted(silent), timing_known))
    return findings


def _slot_graph(graph: WaitGraph) -> dict[Node, set[Node]]:
    """Which head slot waits on which: A -> B when a rank A needs is blocked at B.

    Working on slots rather than ranks keeps the graph tiny however many ranks wait.
    """
    return {
        slot: {graph.heads[m].slot for m in needed if m in graph.heads}
        for slot, needed in graph.needs.items()
    }


def _strongly_connected(graph: dict[Node, set[Node]]) -> list[list[Node]]:
    """Tarjan's algorithm, iterative."""
    index: dict[Node, int] = {}
    low: dict[Node, int] = {}
    on_stack: set[Node] = set()
    stack: list[Node] = []
    components: list[list[Node]] = []

    def visit(node: Node) -> None:
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
                    component: list[Node] = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    components.append(component)
    return components


_ORDER_VOTES = """
WITH
    a AS (SELECT pg_desc, len(members) AS size FROM groups WHERE gid = $a_gid),
    b AS (SELECT pg_desc, len(members) AS size FROM groups WHERE gid = $b_gid),
    -- replicas of each group (same description and size) run the same program, so
    -- their members vote on the usual order too, not only the deadlocked ranks
    ga AS (SELECT g.gid FROM groups g, a
           WHERE g.gid = $a_gid OR (g.pg_desc = a.pg_desc AND len(g.members) = a.size)),
    gb AS (SELECT g.gid FROM groups g, b
           WHERE g.gid = $b_gid OR (g.pg_desc = b.pg_desc AND len(g.members) = b.size)),
    pa AS (SELECT rank, first_record FROM slots WHERE seq = $a_seq AND gid IN (SELECT gid FROM ga)),
    pb AS (SELECT rank, first_record FROM slots WHERE seq = $b_seq AND gid IN (SELECT gid FROM gb))
SELECT pa.rank, pa.first_record < pb.first_record AS a_first
FROM pa JOIN pb USING (rank)
"""


def _order_minority(
    connection: duckdb.DuckDBPyConnection, slots: list[SlotKey], component: list[int]
) -> list[int]:
    """Deadlocked ranks that issued two of the deadlocked collectives in the unusual order."""
    culprits: set[int] = set()
    involved = set(component)
    for i, (a_gid, a_seq, _) in enumerate(slots):
        for b_gid, b_seq, _ in slots[i + 1 :]:
            rows = connection.execute(
                _ORDER_VOTES, {"a_gid": a_gid, "a_seq": a_seq, "b_gid": b_gid, "b_seq": b_seq}
            ).fetchall()
            a_first = {rank for rank, first in rows if first}
            b_first = {rank for rank, first in rows if not first}
            if len(a_first) != len(b_first):
                culprits |= min(a_first, b_first, key=len) & involved
    return sorted(culprits)


def cross_pg_deadlocks(
    connection: duckdb.DuckDBPyConnection, graph: WaitGraph, groups: dict[int, GroupRef]
) -> list[Finding]:
    heads = graph.heads
    findings: list[Finding] = []
    for nodes in _strongly_connected(_slot_graph(graph)):
        slots: list[SlotKey] = [n for n in nodes if len(n) == 3]  # type: ignore[misc]
        if len(slots) < 2 or len({gid for gid, _, _ in slots}) < 2:
            continue
        if any(p2p for _, _, p2p in slots):
            continue
        # An ordering deadlock: everyone waited on has issued that collective alike, only
        # behind something else in its stream. (A rank that skipped or changed it is a
        # divergence finding instead.)
        issued_alike = True
        for gid, seq, _ in slots:
            row = connection.execute(
                "SELECT absent, signatures FROM slot_summary WHERE gid = ? AND seq = ?",
                [gid, seq],
            ).fetchone()
            if row is None or row[0] or row[1] != 1:
                issued_alike = False
        if not issued_alike:
            continue
        component = sorted(r for r, h in heads.items() if h.slot in slots)
        culprits = _order_minority(connection, slots, component)
        blocked = {
            f"{groups[g].label()} #{s}": sorted(r for r in component if heads[r].slot == (g, s, p))
            for g, s, p in sorted(slots, key=lambda x: (x[0], x[1] or 0))
        }
        first = min(component, key=lambda r: (heads[r].created_ns or 0, r))
        example = heads[culprits[0]] if culprits else heads[first]
        description = "; ".join(
            f"ranks {ranks} blocked in {where}" for where, ranks in blocked.items()
        )
        blame = (
            f" rank{'s' if len(culprits) > 1 else ''} {', '.join(map(str, culprits))} issued"
            " them in the opposite order to their peers"
            if culprits
            else " no order has a majority"
        )
        findings.append(
            Finding(
                kind="cross_pg_deadlock",
                group=groups[example.gid],
                collective_seq_id=example.seq,
                op=example.op,
                culprit_ranks=culprits,
                summary=(
                    f"ranks wait on each other across {len(blocked)} groups ({description});"
                    + blame
                ),
                evidence={
                    "blocked": blocked,
                    "culprit_entries": {str(r): {"entry": heads[r].ref} for r in culprits},
                },
                frames={
                    "culprit": {str(r): heads[r].ref for r in culprits},
                    "majority": heads[first].ref,
                    "majority_rank": first,
                },
                time_ns=min(
                    (t for r in component if (t := heads[r].created_ns) is not None), default=None
                ),
                held_ranks=frozenset(component),
            )
        )
    return findings


def p2p_unmatched(
    connection: duckdb.DuckDBPyConnection, groups: dict[int, GroupRef]
) -> list[Finding]:
    rows = connection.execute(
        "SELECT p.rank, p.gid, p.op, p.peer, p.p2p_seq_id, p.time_created_ns, p.record_id"
        " FROM p2p_pending p WHERE p.peer_dumped AND NOT p.peer_posted"
        " ORDER BY p.gid, p.rank, p.record_id"
    ).fetchall()
    findings: dict[tuple[str, int, int], Finding] = {}
    for rank, gid, op, peer, p2p_seq, created, record_id in rows:
        key = (gid, rank, peer)
        if key in findings:
            continue
        findings[key] = Finding(
            kind="p2p_unmatched",
            group=groups[gid],
            collective_seq_id=None,
            op=op,
            culprit_ranks=[peer],
            summary="",
            evidence={
                "waiting_rank": rank,
                "peer": peer,
                "p2p_seq_id": p2p_seq,
                "entry": (rank, record_id),
            },
            frames={"majority": (rank, record_id), "majority_rank": rank, "culprit": {}},
            time_ns=created,
            absent_ranks=frozenset({peer}),
            held_ranks=frozenset({rank}),
        )
    out = list(findings.values())
    for finding in out:
        finding.summary = p2p_summary(finding)
    return out


def p2p_summary(finding: Finding) -> str:
    """The sentence of a ``p2p_unmatched`` finding (one pair, or its replicas)."""
    op = finding.op or "send"
    other = "recv" if op == "send" else "send"
    to = "to" if op == "send" else "from"
    replicas = finding.evidence.get("replicas")
    if replicas:
        waiting = sorted(
            int(r["waiting_rank"]) for r in replicas if r.get("waiting_rank") is not None
        )
        peers = sorted(r for entry in replicas for r in entry["ranks"])
        sentence = (
            f"{_ranks_words(waiting)}' {op}s {to} {_ranks_words(peers)}"
            f" ({len(replicas)} {finding.group.desc} groups) have no matching {other}:"
            f" {_ranks_words(peers)} never posted {'them' if len(peers) > 1 else 'it'}"
        )
    else:
        rank, peer = finding.evidence.get("waiting_rank"), finding.evidence.get("peer")
        peers = [int(peer)] if peer is not None else sorted(finding.absent_ranks)
        sentence = (
            f"rank {rank}'s {op} {to} {_ranks_words(peers)} ({finding.group.label()}) has no"
            f" matching {other}: {_ranks_words(peers)} never posted it"
        )
    waiting_peers = sorted(finding.waiting_ranks)
    if waiting_peers and finding.consequence_of is not None:
        if set(waiting_peers) == set(peers):
            blocked = "they are" if len(peers) > 1 else "it is"
        else:
            blocked = f"{_ranks_words(waiting_peers)} {'are' if len(waiting_peers) > 1 else 'is'}"
        sentence += f": {blocked} blocked behind [{finding.consequence_of}], not at fault"
    return sentence
