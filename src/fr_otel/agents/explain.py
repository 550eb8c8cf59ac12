"""One finding of an analysis, explained for an agent: what it says and why it is there
(its evidence), where in the code (call sites and stacks, culprits against the majority),
who (culprits, ranks waiting behind its cause, suspects) and how it relates to the other
findings (its cause, its consequences)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fr_otel.errors import ArchiveError
from fr_otel.report.words import code_locations, role, where

if TYPE_CHECKING:
    from fr_otel.analysis import Analysis, Finding


def explain_finding(analysis: Analysis, index: int) -> dict[str, Any]:
    """Finding ``index`` of ``analysis`` (its place in ``findings``, as the JSON lists
    them); ``ArchiveError`` when there is no such finding."""
    if not 0 <= index < len(analysis.findings):
        count = len(analysis.findings)
        raise ArchiveError(
            f"job {analysis.job!r} incident {analysis.incident!r} has no finding {index}: "
            + (f"its findings are 0 to {count - 1}" if count else "it has none (healthy)")
        )
    finding = analysis.findings[index]
    evidence = finding.evidence
    return {
        "job": analysis.job,
        "incident": analysis.incident,
        "index": index,
        "kind": finding.kind,
        "role": role(analysis, index, cite="finding {}".format),
        "summary": finding.summary,
        "where": where(finding),
        "call_sites": [{"who": who, "site": site} for who, site in code_locations(finding)],
        "place": finding.place(),
        "process_group": finding.group.to_dict(),
        "collective_seq_id": finding.collective_seq_id,
        "op": finding.op,
        "ranks": {
            "culprits": sorted(finding.culprit_ranks),
            "waiting_not_at_fault": sorted(finding.waiting_ranks),
            "candidates": evidence.get("candidate_ranks"),
            "majority_rank": finding.stacks.majority_rank,
            "group_members": len(finding.group.ranks) if finding.group.ranks else None,
            "without_a_dump": analysis.missing_dumps,
        },
        "evidence": evidence,
        "stacks": _stacks(finding),
        "cause": _brief(analysis, finding.consequence_of),
        "consequences": [_brief(analysis, i) for i in finding.consequences],
        "root_cause": _brief(analysis, analysis.root_cause),
    }


def _stacks(finding: Finding) -> list[dict[str, Any]]:
    """Each stack the finding shows, innermost frame first: the ranks it names (a
    consequence names ranks that wait, not at fault), then the majority's for reference;
    for a tie no side wins, one per side."""
    shown: list[dict[str, Any]] = [
        {"who": f"rank {rank} ({_part(finding, rank)})", "ranks": [rank], "frames": frames}
        for rank, frames in finding.culprit_stacks()
    ]
    if finding.stacks.majority is not None:
        rank = finding.stacks.majority_rank
        shown.append(
            {
                "who": f"rank {rank} (majority)",
                "ranks": [rank] if rank is not None else [],
                "frames": finding.stack(finding.stacks.majority),
            }
        )
    shown += [
        {"who": f"ranks {ranks} (one side of a tie)", "ranks": ranks, "frames": frames}
        for ranks, frames in finding.side_stacks()
    ]
    return shown


def _part(finding: Finding, rank: int) -> str:
    if rank in finding.culprit_ranks:
        return "culprit"
    if rank in finding.waiting_ranks:
        return "waiting, not at fault"
    return "named by the finding"


def _brief(analysis: Analysis, index: int | None) -> dict[str, Any] | None:
    if index is None:
        return None
    finding = analysis.findings[index]
    return {"index": index, "kind": finding.kind, "summary": finding.summary}
