"""The live verdict on a desync: what the agent says, and its record in the archive
(``records``); the record's fields are documented in docs/live-diagnosis.md, and
``to_dict`` is that contract.
"""

from __future__ import annotations

import socket
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from fr_otel.analysis.findings import Finding, rank_list
from fr_otel.live.compare import Candidate
from fr_otel.live.records import RECORD_VERSION


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """A desync named while the job ran."""

    id: str
    kind: str
    """The analyzer's finding kind (``confirm.DESYNC_KINDS``)."""
    culprit_ranks: list[int]
    group: str
    """The process group's name (torch's ``pg_name``)."""
    group_desc: str | None
    seq: int | None
    """The collective sequence number in the group (the majority's, as the analyzer
    names it)."""
    op: str | None
    call_site: str | None
    """Where the first culprit issued its collective: ``file:line in function``."""
    summary: str
    """The analyzer's sentence."""
    divergence_ns: int
    """When the evidence first existed: the later of the first two differing collectives
    was issued (ns since the epoch, the ranks' clock)."""
    known_ns: int
    """When the analyzer confirmed it."""
    analysis_s: float
    running_ranks: list[int]
    """Ranks of this host still running when their rings were read."""
    job: str
    run_id: str | None
    host: str
    policy: str
    incident: str | None = None
    """The incident the ranks flushed for it: declared by the agent, or the one the job
    declared itself since the divergence (None: no rank was left to flush)."""
    stacks: dict[int, dict[str, Any]] | None = None
    """``snapshot`` policy: every local running rank's stack when the verdict was made
    (``stack_request.RankStack.to_json``), by rank."""
    group_ranks: list[int] | None = None
    """The group's global ranks (None: unknown): with its name they identify the group, and
    the trace of its collective (``fr_otel.live.otlp``)."""

    @property
    def seconds(self) -> float:
        """From the divergence to the verdict."""
        return max(self.known_ns - self.divergence_ns, 0) / 1e9

    def line(self) -> str:
        """One line for people: kind, culprits, group, seq, call site, delay."""
        who = f"rank{'s' if len(self.culprit_ranks) > 1 else ''} {rank_list(self.culprit_ranks)}"
        group = f"{self.group_desc or '?'} (pg {self.group})"
        op = f" ({self.op})" if self.op else ""
        site = f" at {self.call_site}" if self.call_site else ""
        return (
            f"live: desync {self.kind}: {who} in {group} collective #{self.seq}{op}{site},"
            f" {self.seconds:.1f} s after the divergence"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"version": RECORD_VERSION, **asdict(self), "seconds": round(self.seconds, 3)}

    def with_incident(self, incident: str | None) -> Verdict:
        return replace(self, incident=incident)

    def with_stacks(self, stacks: dict[int, dict[str, Any]]) -> Verdict:
        return replace(self, stacks=stacks)


def make_verdict(
    *,
    finding: Finding,
    candidate: Candidate,
    verdict_id: str,
    analysis_s: float,
    running: list[int],
    job: str,
    run_id: str | None,
    policy: str,
) -> Verdict:
    return Verdict(
        id=verdict_id,
        kind=finding.kind,
        culprit_ranks=sorted(finding.culprit_ranks),
        group=finding.group.name,
        group_desc=finding.group.desc,
        seq=finding.collective_seq_id,
        op=finding.op,
        call_site=_culprit_site(finding, candidate),
        summary=finding.summary,
        divergence_ns=candidate.divergence_ns,
        known_ns=time.time_ns(),
        analysis_s=round(analysis_s, 3),
        running_ranks=running,
        job=job,
        run_id=run_id,
        host=socket.gethostname(),
        policy=policy,
        group_ranks=list(finding.group.ranks) if finding.group.ranks is not None else None,
    )


def _culprit_site(finding: Finding, candidate: Candidate) -> str | None:
    """The first culprit's call site: from its entry the finding shows, else from the
    collective it issued at the candidate's slot."""
    for rank in sorted(finding.culprit_ranks):
        info = finding.entry_info((finding.stacks.culprit or {}).get(rank))
        if info is not None and info.call_site:
            return info.call_site
        for head in candidate.heads:
            if head.rank == rank and head.site:
                return head.site
    return None
