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

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import duckdb

from fr_otel.analysis import findings as base
from fr_otel.analysis.findings import (
    BlockedIn,
    EntryRef,
    Finding,
    GroupRef,
    Stacks,
    blocked_behind,
    entry_json,
    ranks_words,
)

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
    def ref(self) -> EntryRef:
        return EntryRef(self.rank, self.record_id)

    @property
    def slot(self) -> tuple[int, int | None, bool]:
        # every rank's pending send/recv is its own wait (they pair by peer, not by group)
        return (self.gid, self.rank if self.p2p else self.seq, self.p2p)

    def overdue(self) -> bool:
        """Pending longer than its timeout when the dump was taken (unknown counts as yes)."""
        if self.created_ns is None or self.dump_time_ns is None or not self.timeout_ms:
            return True
        return self.dump_time_ns - self.created_ns >= self.timeout_ms * 1_000_000


@dataclass(kw_only=True)
class StuckEvidence(base.Evidence):
    """A collective every member issued alike and none completed."""

    started_ranks: list[int]
    unstarted_ranks: list[int]
    timing_known: bool
    why: str
    """Who is to blame, in words (not part of the JSON)."""

    JSON_FIELDS = ("started_ranks", "unstarted_ranks", "timing_known")

    def headline(self, finding: Finding) -> str:
        return f"{finding.op} {finding.place()} never completed: {self.why}"


@dataclass(kw_only=True)
class SilentEvidence(base.Evidence):
    """Members with a dump wait on members without one (or, with no ``where``, ranks left
    no dump and the dumps present show nothing wrong)."""

    silent_ranks: list[int]
    present_ranks: list[int]
    by_silence: bool
    started_ranks: list[int] | None = None
    timing_known: bool | None = None
    retired_in_dumps: bool | None = None
    """gloo's dumps show a failed collective retired, like a completed one."""
    where: str | None = None

    JSON_FIELDS = ("silent_ranks", "present_ranks", "by_silence")
    WAIT_FIELDS = ("started_ranks", "timing_known", "retired_in_dumps", "where")
    """Shown only where members with a dump wait (``where``)."""

    def own(self, entries: base.Entries) -> dict[str, Any]:
        shown = self.JSON_FIELDS + (self.WAIT_FIELDS if self.where is not None else ())
        return {name: getattr(self, name) for name in shown}

    def sentence(self, finding: Finding) -> str:
        return silent_summary(finding, self)


@dataclass(kw_only=True)
class DeadlockEvidence(base.Evidence):
    """Ranks waiting on each other across groups, each having issued what the others wait
    for, only later in its stream."""

    blocked: dict[str, list[int]]
    """'<group> #<seq>' -> the ranks blocked there."""
    culprit_entries: dict[int, EntryRef]
    minority: list[int]
    """The ranks that issued them in the unusual order, when one order has a majority."""

    def own(self, entries: base.Entries) -> dict[str, Any]:
        return {
            "blocked": self.blocked,
            "culprit_entries": {
                str(rank): entry_json(ref, entries) for rank, ref in self.culprit_entries.items()
            },
        }

    def own_refs(self) -> Iterator[EntryRef]:
        yield from self.culprit_entries.values()

    def headline(self, finding: Finding) -> str:
        description = "; ".join(
            f"ranks {ranks} blocked in {where}" for where, ranks in self.blocked.items()
        )
        blame = (
            f" {ranks_words(self.minority)} issued them in the opposite order to their peers"
            if self.minority
            else " no order has a majority"
        )
        groups = len(self.blocked)
        return f"ranks wait on each other across {groups} groups ({description});" + blame


@dataclass(kw_only=True)
class P2PEvidence(base.Evidence):
    """A pending send or recv whose peer never posted the other half."""

    waiting_rank: int
    peer: int
    p2p_seq_id: int | None
    culprits: dict[int, BlockedIn] = field(default_factory=dict)
    """Where the peer is blocked instead (added once the heads are known)."""

    JSON_FIELDS = ("waiting_rank", "peer", "p2p_seq_id")

    def add_late(self, out: dict[str, Any], entries: base.Entries) -> None:
        if self.culprits:
            out["culprits"] = {str(r): c.to_dict(entries) for r, c in self.culprits.items()}

    def blocked(self, rank: int, where: str) -> None:
        self.culprits[rank] = BlockedIn(where)

    def merge_culprits(self, other: base.Evidence) -> None:
        # the JSON shows culprits only where a rank is known to be blocked elsewhere
        if self.culprits and isinstance(other, P2PEvidence):
            for rank, culprit in other.culprits.items():
                self.culprits.setdefault(rank, culprit)

    def sentence(self, finding: Finding) -> str:
        return p2p_summary(finding, self)

    @property
    def left_waiting(self) -> tuple[int, int | None] | None:
        return (self.waiting_rank, self.p2p_seq_id)


def load_heads(connection: duckdb.DuckDBPyConnection) -> dict[int, Head]:
    """Each blocked rank's head (``sql/03_waits.sql``: its fields are ``Head``'s)."""
    rows = connection.execute("SELECT rank, head FROM heads").fetchall()
    return {rank: Head(rank=rank, **head) for rank, head in rows}


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
    dumped: frozenset[int] = frozenset()
    """The ranks with a dump."""

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
        return cls(
            heads=heads,
            by_slot=by_slot,
            needs=needs,
            silent_needs=silent_needs,
            dumped=frozenset(dumped),
        )

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


def _issued_alike(connection: duckdb.DuckDBPyConnection, gid: int, seq: int | None) -> bool:
    """Whether every member issued collective ``seq`` of group ``gid``, all alike."""
    row = connection.execute(
        "SELECT absent, signatures FROM slot_summary WHERE gid = ? AND seq = ?", [gid, seq]
    ).fetchone()
    return row is not None and not row[0] and row[1] == 1


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
        if not _issued_alike(connection, gid, seq):
            continue  # not issued alike by everyone: the divergence findings cover it
        unstarted = sorted(h.rank for h in waiting if not h.started)
        started = sorted(h.rank for h in waiting if h.started)
        example = min(waiting, key=lambda h: h.rank)
        if set(group.ranks or ()) - dumped and not (timing_known and unstarted and started):
            continue  # members without a dump could complete it: a silent_rank finding
        if timing_known and unstarted and started:
            culprits = unstarted
            reason = (
                f"{ranks_words(unstarted)} never"
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
                facts=StuckEvidence(
                    started_ranks=started,
                    unstarted_ranks=unstarted,
                    timing_known=timing_known,
                    entry=example.ref,
                    why=reason,
                ),
                stacks=Stacks(
                    majority=example.ref,
                    majority_rank=example.rank,
                    culprit={h.rank: h.ref for h in waiting if h.rank in culprits},
                ),
                time_ns=min((h.created_ns for h in waiting if h.created_ns), default=None),
            )
        )
    return findings


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
    return Finding(
        kind="silent_rank",
        group=group,
        collective_seq_id=None if example.p2p else seq,
        op=example.op,
        culprit_ranks=list(silent),
        facts=SilentEvidence(
            silent_ranks=list(silent),
            present_ranks=present,
            by_silence=True,
            started_ranks=sorted(h.rank for h in waiting if h.started),
            timing_known=timing_known,
            retired_in_dumps=any(h.retired for h in waiting),
            where=where,
            entry=example.ref,
        ),
        stacks=Stacks(majority=example.ref, majority_rank=example.rank, culprit={}),
        time_ns=min((h.created_ns for h in waiting if h.created_ns), default=None),
        held_ranks=frozenset(present),
        absent_ranks=frozenset(silent),
    )


def silent_summary(finding: Finding, facts: SilentEvidence) -> str:
    """The sentence of a ``silent_rank`` finding, as a suspect or as a consequence."""
    silent, present, where = facts.silent_ranks, facts.present_ranks, facts.where
    who = ranks_words(silent)
    if where is None:
        return (
            f"{who} left no dump (or one without entries) and the dumps present show no"
            f" problem: what {'they were' if len(silent) > 1 else 'it was'} doing is unknown,"
            " so the incident cannot be called healthy"
        )
    waits = (
        f"{'every member with a dump' if len(present) > 1 else 'the only member with a dump'}"
        f" ({ranks_words(present)}) waits in {where}, which only {who} could complete"
    )
    if facts.retired_in_dumps:
        waits += " (gloo shows it retired, as it does a collective that failed)"
    if facts.candidate_ranks:
        suspects = base.rank_list(facts.candidate_ranks)
        return f"{waits}; suspects: ranks {suspects}: {facts.reason}"
    if facts.timing_known and present and facts.started_ranks == present:
        waits += " (every member with a dump started it: the network is a suspect too)"
    if finding.culprit_ranks:
        verb = "are the suspects" if len(silent) > 1 else "is the suspect"
        their = "their" if len(silent) > 1 else "its"
        return f"{waits}; {who} left no dump and {verb}: the evidence is {their} silence"
    if facts.same_silence:
        return f"{waits}; the same silence as [{finding.consequence_of}]"
    return f"{waits}; {who} left no dump, and presumably waits behind [{finding.consequence_of}]"


def unexplained_silence(silent: list[int], group: GroupRef) -> Finding:
    """An incident with ranks that left no dump, where the dumps present show nothing
    wrong: not healthy, only unknown."""
    return Finding(
        kind="silent_rank",
        group=group,
        collective_seq_id=None,
        op=None,
        culprit_ranks=[],
        facts=SilentEvidence(silent_ranks=list(silent), present_ranks=[], by_silence=False),
        absent_ranks=frozenset(silent),
    )


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
        if not all(_issued_alike(connection, gid, seq) for gid, seq, _ in slots):
            continue
        component = sorted(r for r, h in heads.items() if h.slot in slots)
        culprits = _order_minority(connection, slots, component)
        blocked = {
            f"{groups[g].label()} #{s}": sorted(r for r in component if heads[r].slot == (g, s, p))
            for g, s, p in sorted(slots, key=lambda x: (x[0], x[1] or 0))
        }
        first = min(component, key=lambda r: (heads[r].created_ns or 0, r))
        example = heads[culprits[0]] if culprits else heads[first]
        findings.append(
            Finding(
                kind="cross_pg_deadlock",
                group=groups[example.gid],
                collective_seq_id=example.seq,
                op=example.op,
                culprit_ranks=culprits,
                facts=DeadlockEvidence(
                    blocked=blocked,
                    culprit_entries={r: heads[r].ref for r in culprits},
                    minority=list(culprits),
                ),
                stacks=Stacks(
                    culprit={r: heads[r].ref for r in culprits},
                    majority=heads[first].ref,
                    majority_rank=first,
                    culprit_first=True,
                ),
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
            facts=P2PEvidence(
                waiting_rank=rank, peer=peer, p2p_seq_id=p2p_seq, entry=EntryRef(rank, record_id)
            ),
            stacks=Stacks(majority=EntryRef(rank, record_id), majority_rank=rank, culprit={}),
            time_ns=created,
            absent_ranks=frozenset({peer}),
            held_ranks=frozenset({rank}),
        )
    return list(findings.values())


def p2p_summary(finding: Finding, facts: P2PEvidence) -> str:
    """The sentence of a ``p2p_unmatched`` finding (one pair, or its replicas)."""
    op = finding.op or "send"
    other = "recv" if op == "send" else "send"
    to = "to" if op == "send" else "from"
    replicas = facts.replicas
    if replicas:
        waiting = sorted(r.waiting_rank for r in replicas if r.waiting_rank is not None)
        peers = sorted(r for entry in replicas for r in entry.ranks)
        sentence = (
            f"{ranks_words(waiting)}' {op}s {to} {ranks_words(peers)}"
            f" ({len(replicas)} {finding.group.desc} groups) have no matching {other}:"
            f" {ranks_words(peers)} never posted {'them' if len(peers) > 1 else 'it'}"
        )
    else:
        peers = [facts.peer]
        sentence = (
            f"rank {facts.waiting_rank}'s {op} {to} {ranks_words(peers)}"
            f" ({finding.group.label()}) has no matching {other}: {ranks_words(peers)}"
            " never posted it"
        )
    return sentence + blocked_behind(sorted(finding.waiting_ranks), peers, finding.consequence_of)
