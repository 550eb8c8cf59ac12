"""What the analyzer reports: findings and the analysis that holds them.

The JSON form (``Analysis.to_dict``) is a contract other tools read; see
``docs/analysis.md``. Each finding kind has its own evidence class (in the module that
makes it), which writes the kind's JSON evidence and its sentence: one source for each.
Entries a finding shows are ``EntryRef`` s until ``resolve_entries`` reads their sizes,
dtypes and stacks, once, for every finding; it returns new findings that carry them.
Rendering for people lives in the CLI and the report.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import duckdb

# declared in ``kinds``; named here too, where ``fr_otel.analysis`` and the CLI read them
from fr_otel.analysis.kinds import KINDS as KINDS
from fr_otel.analysis.kinds import PERFORMANCE_KINDS as PERFORMANCE_KINDS
from fr_otel.stacks import trimmed

if TYPE_CHECKING:
    import pyarrow as pa

Frame = dict[str, Any]
"""One stack frame as the JSON shows it: ``{"name", "filename", "line"}``."""


class EntryRef(NamedTuple):
    """An entry a finding shows, by rank and record id: its sizes, dtypes and stack are
    read at the end, for all findings at once (``resolve_entries``)."""

    rank: int
    record_id: int


@dataclass(frozen=True, slots=True)
class EntryInfo:
    """What the archive holds about an ``EntryRef``: its stack and its shape."""

    frames: list[Frame]
    input_sizes: Any
    output_sizes: Any
    input_dtypes: Any
    output_dtypes: Any
    call_site: str | None

    DETAILS: ClassVar[tuple[str, ...]] = (
        "input_sizes",
        "output_sizes",
        "input_dtypes",
        "output_dtypes",
        "call_site",
    )
    """What the JSON shows of an entry in place of its reference."""

    def details(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.DETAILS}


Entries = Mapping[EntryRef, EntryInfo]
"""Resolved entries, by reference."""

NO_ENTRIES: Entries = {}


def entry_json(ref: EntryRef | None, entries: Entries) -> dict[str, Any]:
    """The JSON keys an entry reference becomes: its sizes, dtypes and call site (none
    when the archive lacks it); ``{"entry": null}`` for no entry."""
    if ref is None:
        return {"entry": None}
    info = entries.get(ref)
    return info.details() if info is not None else {}


def stack_json(ref: EntryRef | None, entries: Entries) -> list[Frame] | None:
    """An entry's stack, innermost first ([] when the dump has none; None for no entry)."""
    if ref is None:
        return None
    info = entries.get(ref)
    return info.frames if info is not None else []


RANKS_IN_WORDS = 16
"""Ranks a sentence names before it says how many more: a hang of a 4,096-rank group would
otherwise write every rank into one line (the JSON's rank lists keep them all)."""


def rank_list(ranks: Iterable[int], *, limit: int | None = RANKS_IN_WORDS) -> str:
    """'1, 3', in the order given; past ``limit`` ranks (None: no limit),
    '0, 8, ... and 1000 more'."""
    listed = list(ranks)
    if limit is None or len(listed) <= limit:
        return ", ".join(map(str, listed))
    return ", ".join(map(str, listed[:limit])) + f" and {len(listed) - limit} more"


def ranks_words(ranks: Iterable[int]) -> str:
    """'rank 3' or 'ranks 1, 3', in the order given (see ``rank_list``)."""
    listed = list(ranks)
    return f"rank{'s' if len(listed) > 1 else ''} {rank_list(listed)}"


def blocked_behind(waiting: list[int], named: list[int], cause: int | None) -> str:
    """': ranks 1, 2 are blocked behind [0], not at fault' (empty when none wait): the
    ranks a consequence names that wait behind its cause; ``named``: the ranks the
    sentence already named (then 'they are')."""
    if not waiting or cause is None:
        return ""
    if set(waiting) == set(named):
        blocked = "they are" if len(named) > 1 else "it is"
    else:
        blocked = f"{ranks_words(waiting)} {'are' if len(waiting) > 1 else 'is'}"
    return f": {blocked} blocked behind [{cause}], not at fault"


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


@dataclass(frozen=True, slots=True)
class BlockedIn:
    """A rank that never issued what a finding waits for: where it is blocked instead."""

    where: str

    def to_dict(self, entries: Entries) -> dict[str, Any]:
        return {"blocked_in": self.where}


@dataclass(frozen=True, slots=True)
class StackSide:
    """One side of a tie: its ranks and one of their entries."""

    ranks: list[int]
    entry: EntryRef | None


@dataclass(kw_only=True)
class Stacks:
    """The entries whose stacks a finding shows: the culprits' (by rank), and one of the
    majority's as the reference; or, for a tie no side wins, one per side."""

    culprit: dict[int, EntryRef | None] | None = None
    majority: EntryRef | None = None
    majority_rank: int | None = None
    sides: list[StackSide] | None = None
    culprit_first: bool = False
    """JSON order only: ``culprit`` before ``majority``."""

    def refs(self) -> Iterator[EntryRef]:
        if self.majority is not None:
            yield self.majority
        for ref in (self.culprit or {}).values():
            if ref is not None:
                yield ref
        for side in self.sides or ():
            if side.entry is not None:
                yield side.entry

    def to_dict(self, entries: Entries) -> dict[str, Any]:
        if self.sides is not None:
            return {
                "sides": [
                    {"ranks": side.ranks, "frames": stack_json(side.entry, entries)}
                    for side in self.sides
                ]
            }
        out: dict[str, Any] = {}
        culprit = (
            {str(r): stack_json(ref, entries) for r, ref in self.culprit.items()}
            if self.culprit is not None
            else None
        )
        if culprit is not None and self.culprit_first:
            out["culprit"] = culprit
        if self.majority is not None or self.majority_rank is not None:
            out["majority"] = stack_json(self.majority, entries)
            out["majority_rank"] = self.majority_rank
        if culprit is not None and not self.culprit_first:
            out["culprit"] = culprit
        return out


@dataclass(kw_only=True)
class Replica:
    """One group of a finding merged over replicas (``evidence.replicas``)."""

    group: GroupRef
    ranks: list[int]
    waiting_rank: int | None = None
    p2p_seq_id: int | None = None
    p2p: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"process_group": self.group.to_dict(), "ranks": self.ranks}
        if self.p2p:
            out["waiting_rank"] = self.waiting_rank
            out["p2p_seq_id"] = self.p2p_seq_id
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class Mention:
    """Another finding as one finding's evidence names it."""

    kind: str
    group: GroupRef
    collective_seq_id: int | None
    ranks: list[int]

    def head(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "process_group": self.group.to_dict(),
            "collective_seq_id": self.collective_seq_id,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class CameBefore(Mention):
    """Another cause of the root's jam that the root explains, and on what basis
    (``evidence.came_before``)."""

    basis: str
    detail: str | None

    def to_dict(self) -> dict[str, Any]:
        return {**self.head(), "ranks": self.ranks, "basis": self.basis, "detail": self.detail}


@dataclass(kw_only=True)
class Evidence:
    """A finding's evidence. Each kind's subclass holds its own facts and writes them
    (``own``) and its sentence (``headline``, or all of ``sentence``); this base holds
    what the later passes add to any kind, in the order they add it."""

    entry: EntryRef | None = None
    """The entry the finding is about; its sizes, dtypes and call site close the JSON."""
    rule: Evidence | None = None
    """A shape rule the same slot breaks (a rule finding merged into this one)."""
    never_completed: Evidence | None = None
    """The ``stuck_in_flight`` evidence of the same slot, merged into this one."""
    ambiguous: bool = False
    candidate_ranks: list[int] | None = None
    """Suspects of an ambiguous finding, none of them blamed."""
    reason: str | None = None
    candidate: bool = False
    """One candidate of an ambiguous root (``rootcause``)."""
    came_before: list[CameBefore] = field(default_factory=list)
    replicas: list[Replica] | None = None
    same_silence: bool | None = None

    JSON_FIELDS: ClassVar[tuple[str, ...]] = ()
    """The kind's own attributes the JSON shows as they are, by name, in order."""

    def own(self, entries: Entries) -> dict[str, Any]:
        """The kind's own JSON keys, in order."""
        return {name: getattr(self, name) for name in self.JSON_FIELDS}

    def own_refs(self) -> Iterator[EntryRef]:
        """The entries the kind's own keys show (besides ``entry``)."""
        return iter(())

    def headline(self, finding: Finding) -> str:
        return ""

    def sentence(self, finding: Finding) -> str:
        """The finding's summary: its headline, and who waits behind its cause."""
        text = self.headline(finding)
        if finding.waiting_ranks:
            waiting = finding.waiting_ranks
            plural = len(waiting) > 1
            text += (
                f"; rank{'s' if plural else ''} {rank_list(waiting)}"
                f" {'wait' if plural else 'waits'} behind [{finding.consequence_of}], not at fault"
            )
        return text

    def refs(self) -> Iterator[EntryRef]:
        if self.entry is not None:
            yield self.entry
        yield from self.own_refs()
        for nested in (self.rule, self.never_completed):
            if nested is not None:
                yield from nested.refs()

    def to_dict(self, entries: Entries = NO_ENTRIES) -> dict[str, Any]:
        out = self.own(entries)
        if self.rule is not None:
            out.setdefault("rule", self.rule.to_dict(entries))
        if self.never_completed is not None:
            out["never_completed"] = self.never_completed.to_dict(entries)
        if self.ambiguous:
            out.setdefault("ambiguous", True)
        if self.candidate_ranks is not None:
            out["candidate_ranks"] = self.candidate_ranks
        if self.reason is not None:
            out["reason"] = self.reason
        self.add_late(out, entries)
        if self.candidate:
            out["candidate"] = True
        if self.came_before:
            out["came_before"] = [c.to_dict() for c in self.came_before]
        if self.replicas is not None:
            out["replicas"] = [r.to_dict() for r in self.replicas]
        if self.same_silence is not None:
            out["same_silence"] = self.same_silence
        if self.entry is not None:
            out.update(entry_json(self.entry, entries))
        return out

    def merge_culprits(self, other: Evidence) -> None:
        """Take the culprits ``other`` details that this evidence lacks (replicas)."""

    def add_late(self, out: dict[str, Any], entries: Entries) -> None:
        """Keys of the kind that a later pass adds (before ``candidate``)."""

    @property
    def left_waiting(self) -> tuple[int, int | None] | None:
        """(rank, p2p_seq_id) of the send or recv the finding leaves waiting, if any."""
        return None


@dataclass(kw_only=True)
class Finding:
    """One thing that went wrong, with the evidence for it."""

    kind: str
    group: GroupRef
    collective_seq_id: int | None
    op: str | None
    """The majority's op at the divergence, without backend prefix."""
    culprit_ranks: list[int]
    facts: Evidence
    """The kind's evidence, typed; ``evidence`` is its JSON form."""
    stacks: Stacks = field(default_factory=Stacks)
    """The entries whose stacks the finding shows; ``frames`` is their JSON form."""
    entries: Entries = field(default_factory=dict)
    """Sizes, dtypes and stacks of the entries the finding shows, once resolved."""
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

    @property
    def summary(self) -> str:
        """One sentence, written by the kind's evidence from the finding as it stands."""
        return self.facts.sentence(self)

    @property
    def evidence(self) -> dict[str, Any]:
        """The evidence as the JSON shows it (kind-specific; see docs/analysis.md)."""
        return self.facts.to_dict(self.entries)

    @property
    def frames(self) -> dict[str, Any]:
        """Stacks, innermost first, when the dumps have them: ``{"culprit": {"<rank>":
        [frame, ...]}, "majority": [frame, ...], "majority_rank": r}``, or for a tie no
        side wins ``{"sides": [{"ranks": [r, ...], "frames": [frame, ...]}, ...]}``."""
        return self.stacks.to_dict(self.entries)

    def place(self) -> str:
        """'mesh_dp (pg 3) collective #41': where the finding is, in words."""
        return f"{self.group.label()} collective #{self.collective_seq_id}"

    def stack(self, ref: EntryRef | None) -> list[Frame]:
        """A resolved entry's stack ([] when unknown)."""
        return stack_json(ref, self.entries) or []

    def culprit_stacks(self) -> list[tuple[int, list[Frame]]]:
        """(rank, stack) of each culprit whose entry the finding shows, by rank."""
        culprit = self.stacks.culprit or {}
        return [(rank, self.stack(culprit[rank])) for rank in sorted(culprit)]

    def side_stacks(self) -> list[tuple[list[int], list[Frame]]]:
        """(ranks, stack) of each side of a tie no side wins, the larger first."""
        return [(side.ranks, self.stack(side.entry)) for side in self.stacks.sides or ()]

    def entry_info(self, ref: EntryRef | None) -> EntryInfo | None:
        """A resolved entry's sizes, dtypes, call site and stack."""
        return self.entries.get(ref) if ref is not None else None

    def replica_groups(self) -> list[GroupRef]:
        """The groups of a finding merged over replicas (its own first)."""
        return [self.group, *(r.group for r in self.facts.replicas or ())]

    def refs(self) -> Iterator[EntryRef]:
        yield from self.facts.refs()
        yield from self.stacks.refs()

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


_ENTRIES = """
SELECT rank, record_id, frames, input_sizes, output_sizes, input_dtypes, output_dtypes,
       call_site
FROM {rows}
WHERE job = ? AND incident = ? AND rank IN ({ranks}) AND record_id IN ({records})
"""


def resolve_entries(
    connection: duckdb.DuckDBPyConnection,
    job: str,
    incident: str,
    findings: list[Finding],
    rows: Callable[[set[int]], str] = lambda ranks: "src",
) -> list[Finding]:
    """The findings, with the entries they show read from ``src`` (or from ``rows`` of
    the ranks they name): sizes, dtypes, call site and stack. Stacks are the heaviest
    column; one read of only the entries that findings show keeps the analysis fast."""
    refs = {ref for finding in findings for ref in finding.refs()}
    entries: dict[EntryRef, EntryInfo] = {}
    if refs:
        ranks = {ref.rank for ref in refs}
        # literal lists: DuckDB skips every file and row group that cannot hold them
        query = _ENTRIES.format(
            rows=rows(ranks),
            ranks=", ".join(str(int(r)) for r in sorted(ranks)),
            records=", ".join(str(int(r)) for r in sorted({ref.record_id for ref in refs})),
        )
        for rank, record_id, frames, ins, outs, in_dtypes, out_dtypes, site in connection.execute(
            query, [job, incident]
        ).fetchall():
            ref = EntryRef(rank, record_id)
            if ref in refs:
                entries[ref] = EntryInfo(trimmed(frames), ins, outs, in_dtypes, out_dtypes, site)
    return [replace(finding, entries=entries) for finding in findings]


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


@functools.cache
def findings_schema() -> pa.Schema:
    """The ``findings`` relation: one row per finding, as ``fr-otel sql`` and a session show
    it. A function: pyarrow (with numpy, a noticeable part of a short command's start) is
    imported only where it is used, and an archive's analysis uses it nowhere else."""
    import pyarrow as pa

    return pa.schema(
        [
            ("job", pa.string()),
            ("incident", pa.string()),
            ("idx", pa.int32()),
            ("kind", pa.string()),
            ("pg_name", pa.string()),
            ("pg_desc", pa.string()),
            ("pg_ranks", pa.list_(pa.int64())),
            ("collective_seq_id", pa.int64()),
            ("op", pa.string()),
            ("culprit_ranks", pa.list_(pa.int64())),
            ("summary", pa.string()),
            ("root_cause", pa.bool_()),
            ("consequence_of", pa.int32()),
            ("waiting_ranks", pa.list_(pa.int64())),
        ]
    )


def findings_table(analyses: Iterable[Analysis]) -> pa.Table:
    """The findings of ``analyses`` as rows of ``findings_schema()``."""
    import pyarrow as pa

    rows = [
        {
            "job": analysis.job,
            "incident": analysis.incident,
            "idx": index,
            "kind": finding.kind,
            "pg_name": finding.group.name,
            "pg_desc": finding.group.desc,
            "pg_ranks": list(finding.group.ranks or ()),
            "collective_seq_id": finding.collective_seq_id,
            "op": finding.op,
            "culprit_ranks": finding.culprit_ranks,
            "summary": finding.summary,
            "root_cause": index == analysis.root_cause,
            "consequence_of": finding.consequence_of,
            "waiting_ranks": sorted(finding.waiting_ranks),
        }
        for analysis in analyses
        for index, finding in enumerate(analysis.findings)
    ]
    return pa.Table.from_pylist(rows, schema=findings_schema())
