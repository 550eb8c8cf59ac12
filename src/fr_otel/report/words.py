"""A finding in words for every renderer (text, HTML, MCP): code locations, ranks, role."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fr_otel.stacks import call_site

if TYPE_CHECKING:
    from fr_otel.analysis import Analysis, Finding

MAX_CULPRIT_SITES = 3


def code_locations(finding: Finding) -> list[tuple[str, str]]:
    """``[("rank 8", "train.py:141 in step"), ("its peers", "train.py:139 in step")]``:
    the culprits' call sites (the first few), then the majority's."""
    found = []
    for rank, frames in finding.culprit_stacks():
        site = call_site(frames)
        if site:
            found.append((f"rank {rank}", site))
        if len(found) == MAX_CULPRIT_SITES:
            break
    majority_site = call_site(finding.stack(finding.stacks.majority))
    if majority_site:
        found.append(("its peers" if found else "", majority_site))
    return found


def where(finding: Finding) -> str | None:
    """'rank 8 at train.py:141 in step; its peers at train.py:139 in step'."""
    parts = [f"{who} at {site}" if who else f"at {site}" for who, site in code_locations(finding)]
    return "; ".join(parts) or None


def listed(ranks: list[int], limit: int | None = None) -> str:
    """'0, 8, 16' (sorted); past ``limit`` ranks, '0, 8, 16 and 40 more'."""
    # here, not at the top: every CLI command imports this module, and the analysis
    # package brings duckdb and pyarrow, slow imports, to commands that never analyse
    from fr_otel.analysis.findings import rank_list

    return rank_list(sorted(ranks), limit=limit)


def ranks_words(finding: Finding, *, limit: int | None = None) -> str:
    """'culprit ranks: 32; waiting (not at fault): 0, 8, 16': who is to blame for a
    finding, and who it names only because they wait behind its cause. ``limit``: list at
    most that many ranks of each kind, then say how many more."""
    words = f"culprit ranks: {listed(finding.culprit_ranks, limit) or 'none'}"
    if finding.waiting_ranks:
        words += f"; waiting (not at fault): {listed(finding.waiting_ranks, limit)}"
    return words


def outline(analysis: Analysis) -> list[tuple[int, int]]:
    """``(index, depth)`` of every finding, in order: each cause at depth 0, followed by
    the findings it explains at depth 1 (the analyzer lists them in that order)."""
    return [
        (index, 0 if finding.consequence_of is None else 1)
        for index, finding in enumerate(analysis.findings)
    ]


def role(analysis: Analysis, index: int, *, cite: Callable[[int], str] = "[{}]".format) -> str:
    """The finding's place in the verdict: the root cause, a consequence of another finding
    (``cite`` names it), independent, or a performance finding, which is no hang's."""
    from fr_otel.analysis.findings import PERFORMANCE_KINDS

    finding = analysis.findings[index]
    if finding.kind in PERFORMANCE_KINDS:
        return "performance, not a hang"
    if index == analysis.root_cause:
        return "root cause"
    if finding.consequence_of is not None:
        return f"consequence of {cite(finding.consequence_of)}"
    return "independent"
