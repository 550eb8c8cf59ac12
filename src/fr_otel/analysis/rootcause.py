"""The wavefront: which finding is the root cause, and which ones it explains.

A finding that exists only because some ranks are absent (a missing rank, a lone send
or recv) is a consequence of another finding when that other finding holds all of those
ranks blocked: they are its culprits, or their oldest unfinished op is in its group at or
after its divergence. Among the findings nothing explains, the earliest is the root cause.
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


def _sorted(connection: duckdb.DuckDBPyConnection, findings: list[Finding]) -> list[Finding]:
    """Earlier divergences first. Clocks differ across hosts and ranks run at different
    paces, so two slots are ordered by a rank that issued both, when one did; by the time
    the majority reached them otherwise."""
    positions = _program_positions(connection, findings)

    def compare(a: Finding, b: Finding) -> int:
        pa, pb = positions.get(id(a)), positions.get(id(b))
        if pa and pb:
            common = sorted(pa.keys() & pb.keys())
            if common:
                votes = sum(1 if pa[r] < pb[r] else -1 for r in common)
                if votes:
                    return -1 if votes > 0 else 1
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
        seq = finding.collective_seq_id if finding.kind != "p2p_unmatched" else None
        direct = finding.held_ranks | held_by(graph.heads, finding.group.key, seq)
        if not finding.waiting_ranks:
            # the culprits of an absence are its victims, not held by it
            direct |= frozenset(finding.culprit_ranks)
        finding.held_ranks = graph.blocked_behind(direct)
    ordered = _sorted(connection, findings)
    parent: dict[int, int] = {}
    for i, finding in enumerate(ordered):
        if not finding.waiting_ranks:
            continue
        for j, other in enumerate(ordered):
            if j == i or (other.waiting_ranks and parent.get(j) == i):
                continue
            if finding.waiting_ranks <= other.held_ranks and not (
                other.waiting_ranks and other.waiting_ranks <= finding.held_ranks and j > i
            ):
                parent[i] = j
                break
    roots = [i for i in range(len(ordered)) if i not in parent]
    if not roots:  # a cycle of mutual explanations: the earliest stands
        roots = [0]
        parent.pop(0, None)

    def root_of(i: int) -> int:
        seen = set()
        while i in parent and i not in seen:
            seen.add(i)
            i = parent[i]
        return i

    final = [ordered[i] for i in roots] + [f for i, f in enumerate(ordered) if i not in roots]
    position = {id(f): k for k, f in enumerate(final)}
    for i, finding in enumerate(ordered):
        finding.consequence_of = position[id(ordered[root_of(i)])] if i in parent else None
    return final, 0
