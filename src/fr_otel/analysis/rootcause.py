"""The wavefront: which finding is the root cause, and which ones it explains.

Every blocked rank ends up waiting, through the wait graph of the ranks' oldest
unfinished ops, on a jam that waits on nothing else (a sink). Findings in a sink are
causes; a finding that exists only because ranks are absent (a missing rank, a lone send
or recv) is a cause only when no divergence sits in the same jam, and a rank that stopped
is one cause however many groups miss it. Every other finding is a consequence,
attributed to the cause that holds the ranks it lacks. Causes are ordered by a rank that
issued both (clocks differ across hosts), else by ranks that issued both in replicas of
the two groups, else by time: the first is the root cause.
"""

from __future__ import annotations

import functools

import duckdb

from fr_otel.analysis.findings import KINDS, Finding
from fr_otel.analysis.waits import WaitGraph, held_by


def _fallback_key(finding: Finding) -> tuple[int, int, str, int]:
    return (
        finding.time_ns if finding.time_ns is not None else 2**63 - 1,
        KINDS.index(finding.kind),
        finding.group.name,
        finding.collective_seq_id or 0,
    )


def _program_positions(
    connection: duckdb.DuckDBPyConnection, findings: list[Finding]
) -> dict[int, dict[int, int]]:
    """Per finding, each rank's record id at its slot: the order in a rank's own program."""
    out: dict[int, dict[int, int]] = {}
    for finding in findings:
        if finding.collective_seq_id is None or finding.kind == "p2p_unmatched":
            continue
        out[id(finding)] = dict(
            connection.execute(
                "SELECT rank, first_record FROM slots WHERE gid = ? AND seq = ?",
                [finding.group.key, finding.collective_seq_id],
            ).fetchall()
        )
    return out


# Undescribed groups of the same size need not run the same program.
_ANONYMOUS_DESCS = ("", "undefined")

_REPLICA_POSITIONS = """
SELECT s.rank, s.first_record
FROM slots s JOIN groups g USING (gid)
WHERE s.seq = $seq AND g.pg_desc = $desc AND len(g.members) = $size
"""


def _replica_positions(
    connection: duckdb.DuckDBPyConnection, finding: Finding
) -> dict[int, int] | None:
    """Like ``_program_positions``, over the finding's group and its replicas (same
    description and size: the other tp or dp groups of a mesh run the same program).

    Two findings in groups no rank shares (rank 1's tp group and rank 3's dp group) are
    then still ordered by ranks that issued both kinds of collective in their own groups.
    """
    group = finding.group
    if (
        finding.collective_seq_id is None
        or finding.kind == "p2p_unmatched"
        or group.desc in (None, *_ANONYMOUS_DESCS)
        or not group.ranks
    ):
        return None
    return dict(
        connection.execute(
            _REPLICA_POSITIONS,
            {"seq": finding.collective_seq_id, "desc": group.desc, "size": len(group.ranks)},
        ).fetchall()
    )


def _vote(pa: dict[int, int] | None, pb: dict[int, int] | None) -> int:
    """-1 when most ranks that issued both issued a's slot first, 1 when b's, else 0."""
    if not pa or not pb:
        return 0
    votes = sum(1 if pa[r] < pb[r] else -1 for r in pa.keys() & pb.keys())
    return -1 if votes > 0 else (1 if votes < 0 else 0)


def _sorted(connection: duckdb.DuckDBPyConnection, findings: list[Finding]) -> list[Finding]:
    """Earlier divergences first. Clocks differ across hosts and ranks run at different
    paces, so two slots are ordered by a rank that issued both, when one did; else by ranks
    that issued both in replicas of the two groups; by the time the majority reached them
    otherwise."""
    positions = _program_positions(connection, findings)
    replicas: dict[int, dict[int, int] | None] = {}

    def replica(finding: Finding) -> dict[int, int] | None:
        # fetched only for the pairs no rank orders directly
        if id(finding) not in replicas:
            replicas[id(finding)] = _replica_positions(connection, finding)
        return replicas[id(finding)]

    def compare(a: Finding, b: Finding) -> int:
        order = _vote(positions.get(id(a)), positions.get(id(b)))
        if order:
            return order
        order = _vote(replica(a), replica(b))
        if order:
            return order
        ka, kb = _fallback_key(a), _fallback_key(b)
        return -1 if ka < kb else (1 if ka > kb else 0)

    return sorted(findings, key=functools.cmp_to_key(compare))


def rank_findings(
    connection: duckdb.DuckDBPyConnection,
    findings: list[Finding],
    graph: WaitGraph,
) -> tuple[list[Finding], int | None]:
    """Order findings (root cause first) and set ``consequence_of``; return the root's index."""
    if not findings:
        return [], None
    for finding in findings:
        direct = finding.held_ranks
        if finding.kind != "p2p_unmatched":  # a lone send/recv holds only the rank waiting in it
            direct |= held_by(graph.heads, finding.group.key, finding.collective_seq_id)
        if not finding.waiting_ranks:
            # the culprits of an absence are its victims, not held by it
            direct |= frozenset(finding.culprit_ranks)
        finding.held_ranks = graph.blocked_behind(direct)
    ordered = _sorted(connection, findings)
    sinks = graph.sinks()
    roots = _roots(ordered, sinks, graph)
    final = [ordered[i] for i in roots] + [f for i, f in enumerate(ordered) if i not in roots]
    root_findings = final[: len(roots)]
    for finding in final[len(roots) :]:
        # explained by the first root that holds the ranks it lacks, or that already
        # reports those ranks absent, else by the main root
        lacking = finding.waiting_ranks or frozenset(finding.culprit_ranks)
        finding.consequence_of = next(
            (
                k
                for k, root in enumerate(root_findings)
                if lacking <= root.held_ranks
                or (
                    finding.kind in ABSENCE_KINDS
                    and root.kind in ABSENCE_KINDS
                    and finding.waiting_ranks <= root.waiting_ranks
                )
            ),
            0,
        )
    for root in root_findings:
        root.consequence_of = None
    return final, 0


ABSENCE_KINDS = frozenset({"missing_rank", "p2p_unmatched"})


def _roots(ordered: list[Finding], sinks: list[frozenset[int]], graph: WaitGraph) -> list[int]:
    """Indexes of the findings that are causes: they sit in a jam that waits on nothing
    else. An absence (a missing rank, a lone send) in the same jam as a divergence is
    that divergence's consequence. Without any blocked rank, every finding stands."""
    if not sinks:
        return list(range(len(ordered)))

    def touched(finding: Finding) -> set[int]:
        hits = set()
        for k, sink in enumerate(sinks):
            if finding.kind in ABSENCE_KINDS:
                if finding.waiting_ranks and finding.waiting_ranks <= sink:
                    hits.add(k)
            else:
                ranks = set(finding.culprit_ranks) or held_by(
                    graph.heads, finding.group.key, finding.collective_seq_id
                )
                if ranks & sink:
                    hits.add(k)
        return hits

    hits = [touched(f) for f in ordered]
    causes = {k for i, f in enumerate(ordered) if f.kind not in ABSENCE_KINDS for k in hits[i]}

    # In a jam of lone sends/recvs the cause is the pair that waits on each other: the
    # rank that never posted its half is itself blocked on the rank waiting for it. The
    # other lone ops in the jam are further up the pipeline, waiting on that pair.
    def mutual(finding: Finding) -> bool:
        waiting = finding.evidence.get("waiting_rank")
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
    for i, finding in enumerate(ordered):
        if not hits[i]:
            continue
        if finding.kind not in ABSENCE_KINDS:
            roots.append(i)
        elif finding.kind == "p2p_unmatched" and mutual(finding):
            if not hits[i] <= causes:
                roots.append(i)
        elif not hits[i] <= causes | paired:
            if finding.kind == "missing_rank" and finding.waiting_ranks <= stopped:
                continue
            roots.append(i)
            if finding.kind == "missing_rank":
                stopped |= finding.waiting_ranks
    return roots or [0]
