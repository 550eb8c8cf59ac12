"""Every finding kind, declared once: the table the analyzer, its renderers, the live check
and the simulator read.

``FINDING_KINDS`` is to finding kinds what ``otel.plan.SPAN_PLAN`` is to span attributes:
adding a kind is one entry here (plus the rule that finds it), and everything that lists
kinds (the tie-break order, the kinds that are waits or absences, the report's words, the
desyncs the live check confirms, the faults ``fr-otel simulate`` injects, the kinds section
of ``docs/analysis.md``) is derived from it. ``tests/unit/test_finding_kinds.py`` fails,
naming what is missing, when a kind the analyzer emits or an evidence class it makes is not
here, or an entry lacks a part.

This module imports nothing but the standard library: the simulator and the live check
read it without loading DuckDB or the analysis passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Category = Literal["desync", "absence", "wait", "performance"]
"""What a kind's evidence is, which decides how the root-cause pass treats it:

- ``desync``: what the members issued differs (the live check confirms these);
- ``absence``: what ranks did *not* do; a rank blocked behind another cause shows as one
  without being at fault;
- ``wait``: ranks waiting on work that never finished, or on each other; like an absence,
  its named ranks may wait as a consequence of another finding;
- ``performance``: a job that is slow, not stuck: never a root cause of a hang nor a
  consequence of one, listed after the hang's findings.
"""

CATEGORIES: tuple[Category, ...] = ("desync", "absence", "wait", "performance")


@dataclass(frozen=True, kw_only=True, slots=True)
class FindingKind:
    """One finding kind: its name, how the analysis treats it and how it is said."""

    name: str
    """The ``kind`` of the JSON, the text output and the report."""
    category: Category
    words: str
    """The report's verdict words for a root cause of this kind."""
    meaning: str
    """What the kind says happened, for ``docs/analysis.md``."""
    evidence: tuple[str, ...]
    """The evidence classes a finding of this kind carries, as ``module.Class`` within
    ``fr_otel.analysis`` (names, not classes: importing them would load DuckDB)."""
    faults: tuple[str, ...] = ()
    """The faults ``fr-otel simulate`` injects whose root cause is this kind."""

    @property
    def desync(self) -> bool:
        """A desync the live check confirms: what members issued, not how long they waited
        (a stall is another verdict, with a threshold)."""
        return self.category == "desync"


FINDING_KINDS: tuple[FindingKind, ...] = (
    FindingKind(
        name="missing_rank",
        category="absence",
        words="a rank never joined a collective",
        meaning="a member never issued a collective its peers wait in",
        evidence=("divergence_evidence.MissingRankEvidence",),
        faults=("missing_rank",),
    ),
    FindingKind(
        name="skipped_collective",
        category="desync",
        words="a rank skipped a collective",
        meaning="a member skipped collectives and went on, its later ones shifted",
        evidence=("divergence_evidence.SkipEvidence",),
        faults=("skipped_collective",),
    ),
    FindingKind(
        name="op_type_mismatch",
        category="desync",
        words="ranks issued different collectives",
        meaning="members issued different ops at one slot",
        evidence=("divergence_evidence.MismatchEvidence", "divergence_evidence.SidesEvidence"),
        faults=("op_type_mismatch",),
    ),
    FindingKind(
        name="size_mismatch",
        category="desync",
        words="ranks disagree on tensor sizes",
        meaning=(
            "members passed different sizes to one collective, or sizes its shape rules"
            " forbid (all_to_all splits that do not add up)"
        ),
        evidence=(
            "divergence_evidence.MismatchEvidence",
            "divergence_evidence.SidesEvidence",
            "rules.ShapeRuleEvidence",
            "rules.AllToAllEvidence",
        ),
        faults=("size_mismatch", "all_to_all_splits"),
    ),
    FindingKind(
        name="dtype_mismatch",
        category="desync",
        words="ranks disagree on dtypes",
        meaning="members passed different dtypes to one collective",
        evidence=("divergence_evidence.MismatchEvidence", "divergence_evidence.SidesEvidence"),
        faults=("dtype_mismatch",),
    ),
    FindingKind(
        name="reordered_collectives",
        category="desync",
        words="ranks issued collectives in a different order",
        meaning="a member issued a window of collectives in another order than its peers",
        evidence=("divergence_evidence.ReorderEvidence",),
        faults=("reordered_collectives",),
    ),
    FindingKind(
        name="cross_pg_deadlock",
        category="wait",
        words="ranks wait on each other across process groups",
        meaning=(
            "ranks wait on each other in different groups; also an ambiguous root the"
            " evidence cannot order, with its candidates"
        ),
        evidence=("waits.DeadlockEvidence", "rootcause.AmbiguousRootEvidence"),
        faults=("cross_pg_deadlock",),
    ),
    FindingKind(
        name="p2p_unmatched",
        category="absence",
        words="a send or receive has no matching peer",
        meaning="a send or recv whose peer never posted its match",
        evidence=("waits.P2PEvidence",),
        faults=("p2p_unmatched",),
    ),
    FindingKind(
        name="stuck_in_flight",
        category="wait",
        words="a collective never completed on some ranks (GPU or network)",
        meaning="every member issued a collective and it never completed (GPU or network)",
        evidence=("waits.StuckEvidence",),
        faults=("gpu_hang", "network"),
    ),
    FindingKind(
        name="silent_rank",
        category="absence",
        words="ranks that left no dump are the only ones the others wait on",
        meaning=(
            "every member with a dump waits in a collective, or a send/recv, that only"
            " ranks without one could complete: they are the suspects, and the evidence is"
            " their silence"
        ),
        evidence=("waits.SilentEvidence",),
    ),
    FindingKind(
        name="straggler",
        category="performance",
        words="a rank is consistently late to its collectives (slow, not stuck)",
        meaning="a rank consistently late to its collectives in a job that is slow, not stuck",
        evidence=("stragglers.StragglerEvidence",),
    ),
)
"""Every finding kind, in the order a tie in time is broken (causes before symptoms)."""

BY_NAME: dict[str, FindingKind] = {kind.name: kind for kind in FINDING_KINDS}

KINDS: tuple[str, ...] = tuple(kind.name for kind in FINDING_KINDS)
"""Every kind's name, in ``FINDING_KINDS``' order."""

ORDER: dict[str, int] = {name: index for index, name in enumerate(KINDS)}
"""A kind's place in the tie-break order."""


def in_category(*categories: Category) -> frozenset[str]:
    """The names of the kinds of ``categories``."""
    return frozenset(kind.name for kind in FINDING_KINDS if kind.category in categories)


PERFORMANCE_KINDS = in_category("performance")
ABSENCE_KINDS = in_category("absence")
WAIT_KINDS = in_category("absence", "wait")
DESYNC_KINDS = frozenset(kind.name for kind in FINDING_KINDS if kind.desync)

SIMULATED_FAULTS: tuple[str, ...] = tuple(f for kind in FINDING_KINDS for f in kind.faults)
"""The faults the simulator injects, each once, in the order of the kinds they produce."""


def words(name: str) -> str:
    """The report's words for a kind (its name, for a kind the table lacks)."""
    kind = BY_NAME.get(name)
    return kind.words if kind is not None else name


def kinds_markdown() -> str:
    """The kinds section of ``docs/analysis.md``, generated from ``FINDING_KINDS``."""
    lines = [
        "| kind | category | what it says | evidence | live desync | simulated by |",
        "|---|---|---|---|---|---|",
    ]
    for kind in FINDING_KINDS:
        evidence = ", ".join(f"`{name.rpartition('.')[2]}`" for name in kind.evidence)
        faults = ", ".join(f"`{fault}`" for fault in kind.faults) or "-"
        lines.append(
            f"| `{kind.name}` | {kind.category} | {kind.meaning} | {evidence} |"
            f" {'yes' if kind.desync else 'no'} | {faults} |"
        )
    return "\n".join(lines) + "\n"


DOC_BEGIN = "<!-- kinds: generated from fr_otel.analysis.kinds.FINDING_KINDS -->\n"
DOC_END = "<!-- end of kinds -->\n"


def with_kinds_section(doc: str) -> str:
    """``doc`` (the text of ``docs/analysis.md``) with its kinds section, between
    ``DOC_BEGIN`` and ``DOC_END``, written from the table."""
    head, begin, rest = doc.partition(DOC_BEGIN)
    _, end, tail = rest.partition(DOC_END)
    if not begin or not end:
        raise ValueError(f"the doc lacks its kinds section's markers {DOC_BEGIN!r}, {DOC_END!r}")
    return head + begin + kinds_markdown() + end + tail
