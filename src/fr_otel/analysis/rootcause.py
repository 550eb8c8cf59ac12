"""The wavefront: which finding is the root cause, and which ones it explains.

Every blocked rank ends up waiting, through the wait graph of the ranks' oldest
unfinished ops, on a jam that waits on nothing else (a sink). Findings in a sink are
causes; a finding that exists only because ranks are absent (a missing rank, a lone send
or recv, a silent rank) is a cause only when no divergence sits in the same jam, and a
rank that stopped is one cause however many groups miss it. In a jam of absences only
(ranks waiting on each other across groups), the earliest absence is the cause and the
others, whose ranks it keeps blocked, are its consequences; when the evidence cannot
order them, the jam's root is an ambiguous ``cross_pg_deadlock`` that names them all as
candidates and says why. A silent rank (a member with no dump) is the suspect only when
nothing with evidence explains the jam, nor a rank with a dump that waits on no silent rank
(a finding blaming it on evidence is the cause then, wherever its peers seem to wait).

Causes are ordered by evidence: two collectives of one group by their sequence numbers;
else by the ranks that issued both (clocks differ across hosts); else by ranks that
issued both in replicas of the two groups (the other tp or dp groups, or undescribed
groups of the same size whose collectives matched); else by time, when the times are far
enough apart for clocks to be comparable. Every other finding is a consequence,
attributed to the cause that holds the ranks it lacks; a consequence's ranks that only
wait behind its cause are its ``waiting_ranks``, not culprits.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import duckdb

from fr_otel.analysis.findings import (
    CameBefore,
    Entries,
    Evidence,
    Finding,
    Mention,
    Replica,
    ranks_words,
)
from fr_otel.analysis.kinds import ABSENCE_KINDS, ORDER, WAIT_KINDS
from fr_otel.analysis.waits import P2PEvidence, WaitGraph, held_by


@dataclass(frozen=True, kw_only=True, slots=True)
class Candidate(Mention):
    """One finding of a jam the evidence cannot order (``evidence.candidates``)."""

    op: str | None

    def to_dict(self) -> dict[str, Any]:
        return {**self.head(), "op": self.op, "ranks": self.ranks}


@dataclass(kw_only=True)
class AmbiguousRootEvidence(Evidence):
    """A jam of absences waiting on each other across groups that nothing orders: every
    candidate is named, none blamed."""

    ambiguous: bool = True
    blocked: dict[str, list[int]]
    candidates: list[Candidate]
    text: str
    """The sentence (not part of the JSON)."""

    def own(self, entries: Entries) -> dict[str, Any]:
        return {
            "ambiguous": True,
            "blocked": self.blocked,
            "candidates": [c.to_dict() for c in self.candidates],
            "reason": self.reason,
        }

    def sentence(self, finding: Finding) -> str:
        return self.text


TIME_MARGIN_NS = 100_000_000
"""Two findings whose times differ by less than this are not ordered by time: clocks of
different hosts disagree by milliseconds, and ranks waiting on each other reach their
collectives within microseconds of one another."""

DECIDED = ("sequence", "ranks", "replicas", "time")
"""Bases of an order that count as evidence."""


def _structural_key(finding: Finding) -> tuple[int, str, int, int]:
    """An order that depends on nothing but what the finding names (for ties)."""
    ranks = finding.culprit_ranks or sorted(finding.absent_ranks) or [2**31]
    return (
        ORDER[finding.kind],
        f"{finding.group.desc or ''}\0{finding.group.name}",
        finding.collective_seq_id if finding.collective_seq_id is not None else -1,
        min(ranks),
    )


# Undescribed groups of the same size need not run the same program.
_ANONYMOUS_DESCS = ("", "undefined")

_REPLICA_POSITIONS = """
SELECT s.rank, s.first_record
FROM slots s JOIN groups g USING (gid)
WHERE s.seq = $seq AND g.pg_desc = $desc AND len(g.members) = $size
"""

_MATCHING_GROUPS = """
-- undescribed groups of the same size whose collectives were this group's, signature for
-- signature, over the last few sequence numbers up to this one: the same role
WITH mine AS (
    SELECT seq, majority_sig FROM slot_summary
    WHERE gid = $gid AND seq BETWEEN $seq - 8 AND $seq
),
candidates AS (
    SELECT gid FROM groups
    WHERE gid <> $gid AND len(members) = $size AND coalesce(pg_desc, '') IN ('', 'undefined')
)
SELECT ss.gid
FROM slot_summary ss JOIN mine m USING (seq)
WHERE ss.gid IN (SELECT gid FROM candidates)
GROUP BY ss.gid
HAVING bool_and(ss.majority_sig = m.majority_sig AND ss.signatures = 1)
   AND bool_or(ss.seq = $seq)
"""


@dataclass(frozen=True, slots=True)
class Order:
    sign: int
    """-1: a first; 1: b first; 0: undecided."""
    basis: str
    """``sequence``, ``ranks``, ``replicas``, ``time`` (evidence), or ``close in time`` /
    ``nothing`` (no evidence)."""
    detail: str = ""


class _Orderer:
    """Orders findings by evidence, fetching positions only for the pairs that need them."""

    def __init__(self, connection: duckdb.DuckDBPyConnection) -> None:
        self.connection = connection
        self.positions: dict[int, dict[int, int] | None] = {}
        self.replicas: dict[int, dict[int, int] | None] = {}
        self.replica_groups: dict[int, int] = {}

    def _positions(self, finding: Finding) -> dict[int, int] | None:
        """Each rank's record id at the finding's slot: the order in its own program."""
        if id(finding) not in self.positions:
            if finding.collective_seq_id is None or finding.kind == "p2p_unmatched":
                self.positions[id(finding)] = None
            else:
                self.positions[id(finding)] = dict(
                    self.connection.execute(
                        "SELECT rank, first_record FROM slots WHERE gid = ? AND seq = ?",
                        [finding.group.key, finding.collective_seq_id],
                    ).fetchall()
                )
        return self.positions[id(finding)]

    def _replica_positions(self, finding: Finding) -> dict[int, int] | None:
        """Like ``_positions``, over the finding's group and its replicas: groups of the
        same description and size (the other tp or dp groups of a mesh run the same
        program), or undescribed groups of the same size whose collectives matched.

        Two findings in groups no rank shares (rank 1's tp group and rank 3's dp group) are
        then still ordered by ranks that issued both kinds of collective in their own groups.
        """
        if id(finding) in self.replicas:
            return self.replicas[id(finding)]
        group = finding.group
        seq = finding.collective_seq_id
        result: dict[int, int] | None = None
        if seq is not None and finding.kind != "p2p_unmatched" and group.ranks:
            if group.desc not in (None, *_ANONYMOUS_DESCS):
                result = dict(
                    self.connection.execute(
                        _REPLICA_POSITIONS,
                        {"seq": seq, "desc": group.desc, "size": len(group.ranks)},
                    ).fetchall()
                )
            else:
                gids = [group.key] + [
                    gid
                    for (gid,) in self.connection.execute(
                        _MATCHING_GROUPS,
                        {"gid": group.key, "seq": seq, "size": len(group.ranks)},
                    ).fetchall()
                ]
                self.replica_groups[id(finding)] = len(gids) - 1
                if len(gids) > 1:
                    listed = ", ".join(str(int(g)) for g in gids)
                    result = dict(
                        self.connection.execute(
                            "SELECT rank, first_record FROM slots"
                            f" WHERE seq = ? AND gid IN ({listed})",
                            [seq],
                        ).fetchall()
                    )
        self.replicas[id(finding)] = result
        return result

    def order(self, a: Finding, b: Finding) -> Order:
        if a is b:
            return Order(0, "nothing")
        if (
            a.group.key == b.group.key
            and a.collective_seq_id is not None
            and b.collective_seq_id is not None
            and a.collective_seq_id != b.collective_seq_id
            and "p2p_unmatched" not in (a.kind, b.kind)
        ):
            return Order(-1 if a.collective_seq_id < b.collective_seq_id else 1, "sequence")
        vote = _vote(self._positions(a), self._positions(b))
        if vote:
            return Order(vote, "ranks", "ranks that issued both did so in this order")
        vote = _vote(self._replica_positions(a), self._replica_positions(b))
        if vote:
            return Order(
                vote, "replicas", "ranks in the same role, in replicas of the two groups, did"
            )
        if a.time_ns is not None and b.time_ns is not None and a.time_ns != b.time_ns:
            gap = abs(a.time_ns - b.time_ns)
            sign = -1 if a.time_ns < b.time_ns else 1
            if gap >= TIME_MARGIN_NS:
                return Order(sign, "time", f"{gap / 1e9:.3f} s apart")
            return Order(
                sign,
                "close in time",
                f"no rank, in these groups or replicas of them, issued both, and they were"
                f" reached {gap / 1e6:.3f} ms apart: too close for clocks to order them",
            )
        return Order(
            0,
            "nothing",
            "no rank, in these groups or replicas of them, issued both, and their times are"
            " unknown",
        )

    def compare(self, a: Finding, b: Finding) -> int:
        """A total order for sorting: evidence first, then time, then what they name."""
        order = self.order(a, b)
        if order.sign:
            return order.sign
        ka, kb = _structural_key(a), _structural_key(b)
        return -1 if ka < kb else (1 if ka > kb else 0)


def _vote(pa: dict[int, int] | None, pb: dict[int, int] | None) -> int:
    """-1 when most ranks that issued both issued a's slot first, 1 when b's, else 0."""
    if not pa or not pb:
        return 0
    votes = sum(1 if pa[r] < pb[r] else -1 for r in pa.keys() & pb.keys())
    return -1 if votes > 0 else (1 if votes < 0 else 0)


def rank_findings(
    connection: duckdb.DuckDBPyConnection,
    findings: list[Finding],
    graph: WaitGraph,
) -> tuple[list[Finding], int | None]:
    """Order findings (root cause first, each cause followed by what it explains), set
    ``consequence_of``, ``consequences`` and ``waiting_ranks``; return the root's index."""
    if not findings:
        return [], None
    for finding in findings:
        direct = finding.held_ranks
        if finding.kind != "p2p_unmatched":  # a lone send/recv holds only the rank waiting in it
            direct |= held_by(graph.heads, finding.group.key, finding.collective_seq_id)
        if not finding.absent_ranks:
            # the culprits of an absence are its victims, not held by it
            direct |= frozenset(finding.culprit_ranks)
        if finding.kind == "silent_rank":
            # whoever waits on the silent ranks, in any group
            direct |= finding.absent_ranks
        finding.held_ranks = graph.blocked_behind(direct)
    orderer = _Orderer(connection)
    ordered = sorted(findings, key=functools.cmp_to_key(orderer.compare))
    sinks = graph.sinks()
    roots = _roots(ordered, sinks, graph)
    roots, demoted, ambiguous = _settle_jams(orderer, ordered, roots, sinks, graph)
    root_findings = [ordered[i] for i in roots]
    if ambiguous is not None:
        root_findings.insert(0, ambiguous)
    causes: dict[int, int] = {}  # id(finding) -> index of its cause among root_findings
    for index, finding in enumerate(ordered):
        if index in roots:
            continue
        if index in demoted:
            cause = demoted[index]
            causes[id(finding)] = next(k for k, r in enumerate(root_findings) if r is cause)
            continue
        # explained by the first root that holds the ranks it lacks, or that already
        # reports those ranks absent, else by the main root
        lacking = finding.absent_ranks or frozenset(finding.culprit_ranks)
        causes[id(finding)] = next(
            (
                k
                for k, root in enumerate(root_findings)
                if (lacking and lacking <= root.held_ranks)
                or (
                    finding.kind in ABSENCE_KINDS
                    and root.kind in ABSENCE_KINDS
                    and finding.absent_ranks
                    and finding.absent_ranks <= root.absent_ranks
                )
            ),
            0,
        )
    # each cause, then the findings it explains: the output reads as a tree
    final: list[Finding] = []
    for k, root in enumerate(root_findings):
        root.consequence_of = None
        final.append(root)
        mine = [f for f in ordered if causes.get(id(f)) == k]
        mine.sort(key=lambda f: (f.collective_seq_id is None, *_structural_key(f)))
        for finding in _merge_replicas(mine):
            causes[id(finding)] = k
            final.append(finding)
    position = {id(f): i for i, f in enumerate(final)}
    for finding in final:
        finding.consequences = []
    for finding in final:
        if id(finding) in causes:
            cause = root_findings[causes[id(finding)]]
            finding.consequence_of = position[id(cause)]
            cause.consequences.append(position[id(finding)])
            _split_waiting(finding, cause)
    return final, 0


MERGED_KINDS = ("missing_rank", "p2p_unmatched")


def _merge_replicas(findings: list[Finding]) -> list[Finding]:
    """One cause's consequences of one kind, at the same place in replicas of one group
    (the 8 dp groups its tp peers miss, the 8 pipeline sends they never post), are one
    finding: the fault shows once, with every group in ``evidence.replicas``."""
    out: list[Finding] = []
    merged: dict[tuple[str, str, int | None, str | None], Finding] = {}
    for finding in findings:
        desc = finding.group.desc
        if finding.kind not in MERGED_KINDS or desc in (None, *_ANONYMOUS_DESCS):
            out.append(finding)
            continue
        key = (
            finding.kind,
            desc,
            finding.collective_seq_id,
            finding.op,
        )
        first = merged.get(key)
        if first is None:
            merged[key] = finding
            out.append(finding)
            continue
        if first.facts.replicas is None:
            first.facts.replicas = [_replica_entry(first)]
        first.facts.replicas.append(_replica_entry(finding))
        first.culprit_ranks = sorted({*first.culprit_ranks, *finding.culprit_ranks})
        first.absent_ranks |= finding.absent_ranks
        first.held_ranks |= finding.held_ranks
        times = [t for t in (first.time_ns, finding.time_ns) if t is not None]
        first.time_ns = min(times) if times else None
        first.facts.merge_culprits(finding.facts)
    return out


def _replica_entry(finding: Finding) -> Replica:
    ranks = sorted(finding.absent_ranks or finding.culprit_ranks)
    facts = finding.facts
    if isinstance(facts, P2PEvidence):
        return Replica(
            group=finding.group,
            ranks=ranks,
            waiting_rank=facts.waiting_rank,
            p2p_seq_id=facts.p2p_seq_id,
            p2p=True,
        )
    return Replica(group=finding.group, ranks=ranks)


def _split_waiting(finding: Finding, cause: Finding) -> None:
    """A consequence names ranks that wait behind its cause: those are not culprits."""
    if finding.kind == "silent_rank" and cause.kind == "silent_rank":
        finding.facts.same_silence = finding.absent_ranks <= cause.absent_ranks
    if finding.kind == "silent_rank" or finding.facts.candidate:
        # a silent rank explained by evidence elsewhere, or one candidate of an
        # ambiguous root: no one is to blame for this finding on its own
        finding.culprit_ranks = []
        return
    if finding.kind not in WAIT_KINDS:
        return
    at_fault = set(cause.culprit_ranks)
    waiting = [r for r in finding.culprit_ranks if r not in at_fault and r in cause.held_ranks]
    if waiting:
        finding.culprit_ranks = [r for r in finding.culprit_ranks if r not in waiting]
        finding.waiting_ranks = sorted(set(finding.waiting_ranks) | set(waiting))


def _roots(ordered: list[Finding], sinks: list[frozenset[int]], graph: WaitGraph) -> list[int]:
    """Indexes of the findings that are causes: they sit in a jam that waits on nothing
    else. An absence (a missing rank, a lone send) in the same jam as a divergence is
    that divergence's consequence. Without any blocked rank, every finding stands."""
    if not sinks:
        return list(range(len(ordered)))
    hits = [_touched(f, sinks, graph) for f in ordered]
    causes = {k for i, f in enumerate(ordered) if f.kind not in ABSENCE_KINDS for k in hits[i]}

    # In a jam of lone sends/recvs the cause is the pair that waits on each other: the
    # rank that never posted its half is itself blocked on the rank waiting for it. The
    # other lone ops in the jam are further up the pipeline, waiting on that pair.
    def mutual(finding: Finding) -> bool:
        left = finding.facts.left_waiting
        waiting = left[0] if left is not None else None
        culprit = finding.culprit_ranks[0] if finding.culprit_ranks else None
        head = graph.heads.get(culprit) if culprit is not None else None
        return head is not None and waiting in graph.needs.get(head.slot, set())

    paired = {
        k for i, f in enumerate(ordered) if f.kind == "p2p_unmatched" and mutual(f) for k in hits[i]
    }
    roots = []
    # A rank that stopped (stuck in host code, or finished early) is absent from every
    # group whose peers went on: from its tp group, and from its dp group, where the
    # peer that finished its own tp step waits. One stop is one cause: the absence the
    # majority reached first (``ordered`` is in program order); the later ones follow.
    stopped: set[int] = set()
    silenced: set[int] = set()
    for i, finding in enumerate(ordered):
        if not hits[i]:
            continue
        if finding.kind == "silent_rank":
            # one silence is one suspect, however many groups wait on it
            if not finding.absent_ranks <= silenced:
                roots.append(i)
                silenced |= finding.absent_ranks
            continue
        if finding.kind not in ABSENCE_KINDS:
            roots.append(i)
        elif finding.kind == "p2p_unmatched" and mutual(finding):
            if not hits[i] <= causes:
                roots.append(i)
        elif not hits[i] <= causes | paired:
            if finding.kind == "missing_rank" and finding.absent_ranks <= stopped:
                continue
            roots.append(i)
            if finding.kind == "missing_rank":
                stopped |= finding.absent_ranks
    # a silent rank is a suspect only where no root has evidence, in any jam: one root with
    # evidence drops every silent root, even in a jam it does not touch (a rank that left
    # no dump may be stuck behind that culprit for all the dumps show, and a silence
    # beside evidence would be a second suspect on no evidence). Where only silences are
    # roots, a finding that blames a dumped rank on evidence may still go first.
    if any(ordered[i].kind != "silent_rank" for i in roots):
        roots = [i for i in roots if ordered[i].kind != "silent_rank"]
    elif roots:
        roots = _evidence_before_silence(ordered, roots, graph) or roots
    return roots or [0]


def _evidence_before_silence(
    ordered: list[Finding], roots: list[int], graph: WaitGraph
) -> list[int]:
    """The findings that blame, on evidence, a rank with a dump that waits on no silent
    rank, where only silences are causes: their silence explains the ranks blocked behind
    them, not that one (it never issued what its peers went on to, stuck in host code, or
    issued something else), so the silent ranks are not the suspects; it is.

    Where gloo left the peers' last blocking collective unretired (their ``wait()``
    returned first) and no member shows it done, the peers seem to wait in it on the
    silent member, and the stopped rank, which they went past, holds no one in the wait
    graph: only its finding says what the dumps show."""
    held = frozenset().union(*(ordered[i].held_ranks for i in roots))
    free = graph.dumped - held
    found: list[int] = []
    stopped: set[int] = set()
    for i, finding in enumerate(ordered):
        culprits = set(finding.culprit_ranks)
        if finding.kind == "silent_rank" or not culprits & free or not culprits <= graph.dumped:
            continue
        if finding.kind == "missing_rank":
            # one stop is one cause, however many groups miss it
            if finding.absent_ranks <= stopped:
                continue
            stopped |= finding.absent_ranks
        found.append(i)
    return found


def _touched(finding: Finding, sinks: list[frozenset[int]], graph: WaitGraph) -> set[int]:
    """The sinks a finding is about."""
    hits = set()
    for k, sink in enumerate(sinks):
        if finding.kind in ABSENCE_KINDS:
            if finding.absent_ranks and finding.absent_ranks <= sink:
                hits.add(k)
        else:
            ranks = set(finding.culprit_ranks) or held_by(
                graph.heads, finding.group.key, finding.collective_seq_id
            )
            if ranks & sink:
                hits.add(k)
    return hits


def _settle_jams(
    orderer: _Orderer,
    ordered: list[Finding],
    roots: list[int],
    sinks: list[frozenset[int]],
    graph: WaitGraph,
) -> tuple[list[int], dict[int, Finding], Finding | None]:
    """In a jam whose causes are all absences (ranks waiting on each other across groups),
    one absence came first and keeps the others' ranks blocked. Keep it as the root and
    demote the ones it explains, when evidence orders them; when it cannot, make an
    ambiguous root that names them all.

    Returns the remaining roots, the demoted findings with their cause, and the
    ambiguous root (for the main jam) if there is one.
    """
    demoted: dict[int, Finding] = {}
    ambiguous: Finding | None = None
    if not sinks:
        return roots, demoted, None
    hits = {i: _touched(ordered[i], sinks, graph) for i in roots}
    kept: list[int] = []
    for i in roots:
        if i in demoted:
            continue
        first = ordered[i]
        kept.append(i)
        if first.kind not in ABSENCE_KINDS:
            continue
        rivals = [
            j
            for j in roots
            if j != i
            and j not in demoted
            and j not in kept
            and ordered[j].kind in ABSENCE_KINDS
            and hits[i] & hits[j]
            and ordered[j].absent_ranks
            and ordered[j].absent_ranks <= first.held_ranks
        ]
        if not rivals:
            continue
        orders = {j: orderer.order(first, ordered[j]) for j in rivals}
        undecided = [j for j in rivals if orders[j].basis not in DECIDED or orders[j].sign >= 0]
        if undecided and ambiguous is None and not kept[:-1]:
            # the main jam cannot be ordered: say so instead of picking one
            ambiguous = _ambiguous_root(first, [ordered[j] for j in undecided], orders, graph)
            for finding in (first, *(ordered[j] for j in undecided)):
                finding.facts.candidate = True
            kept.pop()
            for j in (i, *undecided):
                demoted[j] = ambiguous
            for j in rivals:
                if j not in undecided:
                    demoted[j] = ambiguous
            continue
        for j in rivals:
            if j not in undecided:
                demoted[j] = first
                rival = ordered[j]
                first.facts.came_before.append(
                    CameBefore(
                        kind=rival.kind,
                        group=rival.group,
                        collective_seq_id=rival.collective_seq_id,
                        ranks=sorted(rival.absent_ranks or rival.culprit_ranks),
                        basis=orders[j].basis,
                        detail=orders[j].detail,
                    )
                )
    return kept, demoted, ambiguous


def _ambiguous_root(
    first: Finding, others: list[Finding], orders: dict[int, Order], graph: WaitGraph
) -> Finding:
    """One finding for a jam whose order the evidence cannot tell."""
    candidates = [first, *others]
    reasons = sorted({o.detail for o in orders.values() if o.detail})
    held = frozenset().union(*(f.held_ranks for f in candidates))
    blocked: dict[str, list[int]] = {}
    for finding in candidates:
        where = f"{finding.group.label()} #{finding.collective_seq_id}"
        ranks = sorted(r for r, h in graph.heads.items() if h.gid == finding.group.key)
        blocked[where] = ranks
    who = "; ".join(_candidate_words(f) for f in candidates)
    suspects = sorted({r for f in candidates for r in (f.absent_ranks or f.culprit_ranks)})
    reason = reasons[0] if reasons else "the evidence cannot order them"
    return Finding(
        kind="cross_pg_deadlock",
        group=first.group,
        collective_seq_id=first.collective_seq_id,
        op=first.op,
        culprit_ranks=[],
        facts=AmbiguousRootEvidence(
            blocked=blocked,
            candidates=[
                Candidate(
                    kind=f.kind,
                    group=f.group,
                    collective_seq_id=f.collective_seq_id,
                    op=f.op,
                    ranks=sorted(f.absent_ranks or f.culprit_ranks),
                )
                for f in candidates
            ],
            reason=reason,
            text=(
                f"ranks wait on each other across {len({f.group.key for f in candidates})}"
                f" groups and the evidence cannot tell which came first: {who}; {reason}."
                f" Suspects: {ranks_words(suspects)}"
            ),
        ),
        time_ns=min((f.time_ns for f in candidates if f.time_ns is not None), default=None),
        held_ranks=held,
    )


def _candidate_words(finding: Finding) -> str:
    who = ranks_words(sorted(finding.absent_ranks or finding.culprit_ranks))
    return (
        f"{who} never issued {finding.op or '?'} {finding.group.label()}"
        f" #{finding.collective_seq_id}"
    )
