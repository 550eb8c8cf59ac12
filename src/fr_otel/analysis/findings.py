"""What the analyzer reports: findings and the analysis that holds them.

The JSON form (``Analysis.to_dict``) is a contract other tools read; see
``docs/analysis.md``. Rendering for people lives in the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FrameRef = tuple[int, int]
"""(rank, record_id) of an entry whose stack a finding shows; resolved to frames at the end."""

KINDS = (
    "missing_rank",
    "skipped_collective",
    "op_type_mismatch",
    "size_mismatch",
    "dtype_mismatch",
    "reordered_collectives",
    "cross_pg_deadlock",
    "p2p_unmatched",
    "stuck_in_flight",
    "silent_rank",
    "straggler",
)
"""Every finding kind, in the order a tie in time is broken (causes before symptoms)."""

PERFORMANCE_KINDS = frozenset({"straggler"})
"""Kinds of a job that is slow, not stuck: never the root cause of a hang, listed after
the hang findings, never a consequence of one."""

ABSENCE_KINDS = frozenset({"missing_rank", "p2p_unmatched", "silent_rank"})
"""Kinds whose evidence is what ranks did *not* do: a rank blocked elsewhere behind another
cause shows as one of these without being at fault."""

WAIT_KINDS = ABSENCE_KINDS | {"stuck_in_flight", "cross_pg_deadlock"}
"""Kinds whose named ranks may be waiting as a consequence of another finding (rather than
having issued something wrong): in a consequence, those ranks are ``waiting_ranks``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupRef:
    """A process group as the findings name it: by name and global rank set."""

    name: str
    desc: str | None
    ranks: tuple[int, ...] | None
    key: int = 0
    """The analyzer's group id (a hash of name and rank set); not part of the JSON."""

    def label(self) -> str:
        return f"{self.desc or '?'} (pg {self.name})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "desc": self.desc or "",
            "ranks": list(self.ranks) if self.ranks is not None else None,
        }


@dataclass(kw_only=True)
class Finding:
    """One thing that went wrong, with the evidence for it."""

    kind: str
    group: GroupRef
    collective_seq_id: int | None
    op: str | None
    """The majority's op at the divergence, without backend prefix."""
    culprit_ranks: list[int]
    summary: str
    evidence: dict[str, Any] = field(default_factory=dict)
    frames: dict[str, Any] = field(default_factory=dict)
    """Stacks, innermost first, when the dumps have them: ``{"culprit": {rank: [frame, ...]},
    "majority": [frame, ...], "majority_rank": r}``, or for a tie no side wins (evidence
    ``ambiguous``) ``{"sides": [{"ranks": [r, ...], "frames": [frame, ...]}, ...]}``, one per
    side, the larger first."""
    time_ns: int | None = None
    """When the majority reached the divergence (orders findings into a wavefront)."""
    consequence_of: int | None = None
    """Index of the finding that explains this one."""
    waiting_ranks: list[int] = field(default_factory=list)
    """Ranks this finding names that are not at fault: they are blocked behind its cause
    (a consequence's absent ranks, a lone send's peer stuck elsewhere)."""
    consequences: list[int] = field(default_factory=list)
    """Indexes of the findings this one explains directly."""
    held_ranks: frozenset[int] = frozenset()
    """Ranks this finding keeps blocked (used to tell causes from consequences)."""
    absent_ranks: frozenset[int] = frozenset()
    """Ranks whose absence makes this finding (a consequence when another finding holds them)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "process_group": self.group.to_dict(),
            "collective_seq_id": self.collective_seq_id,
            "op": self.op,
            "culprit_ranks": sorted(self.culprit_ranks),
            "summary": self.summary,
            "evidence": self.evidence,
            "frames": self.frames,
            "consequence_of": self.consequence_of,
            "waiting_ranks": sorted(self.waiting_ranks),
            "consequences": list(self.consequences),
        }


@dataclass(kw_only=True)
class Analysis:
    """The result of analysing one incident."""

    job: str
    incident: str
    world_size: int | None
    ranks: list[int]
    missing_dumps: list[int]
    findings: list[Finding]
    root_cause: int | None
    input_problems: list[dict[str, str]] = field(default_factory=list)
    """Dump files that could not be read (analysing dumps directly): path, problem, detail."""
    snapshot: dict[str, Any] | None = None
    """For a snapshot of a running job: how it was read (``analysis.snapshots``)."""

    @property
    def healthy(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "incident": self.incident,
            "world_size": self.world_size,
            "ranks": self.ranks,
            "missing_dumps": self.missing_dumps,
            "findings": [f.to_dict() for f in self.findings],
            "root_cause": self.root_cause,
            "input_problems": self.input_problems,
            "snapshot": self.snapshot,
        }
