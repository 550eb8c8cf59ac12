"""Typed findings: each kind's evidence class, entry references, and their resolution."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from fr_otel.analysis import analyze, open_session
from fr_otel.analysis.divergence_evidence import MismatchEvidence, SkipEvidence
from fr_otel.analysis.findings import (
    RANKS_IN_WORDS,
    EntryRef,
    rank_list,
    ranks_words,
    resolve_entries,
)
from fr_otel.sim import FleetSpec, simulate, write_fleet


def _fleet(tmp_path: Path, fault: str) -> Path:
    out = tmp_path / fault
    write_fleet(simulate(FleetSpec(world=8, entries=120, fault=fault, seed=0)), out)
    return out


def _no_refs(value: object) -> bool:
    """Whether no entry reference (nor any tuple) is left in a JSON value."""
    if isinstance(value, tuple):
        return False
    if isinstance(value, dict):
        return all(_no_refs(v) for v in value.values())
    if isinstance(value, list):
        return all(_no_refs(v) for v in value)
    return True


@pytest.mark.parametrize(
    ("fault", "evidence"),
    [("size_mismatch", MismatchEvidence), ("skipped_collective", SkipEvidence)],
)
def test_each_kind_has_its_evidence_class(tmp_path: Path, fault: str, evidence: type) -> None:
    analysis = analyze(_fleet(tmp_path, fault))
    assert analysis.root_cause is not None
    root = analysis.findings[analysis.root_cause]
    assert isinstance(root.facts, evidence)
    as_json = analysis.to_dict()
    assert _no_refs(as_json)
    json.dumps(as_json)  # plain JSON
    # the JSON is the typed evidence written out: the summary quotes the resolved sizes
    assert as_json["findings"][analysis.root_cause]["evidence"] == root.evidence
    assert as_json["findings"][analysis.root_cause]["summary"] == root.summary


def test_rank_keys_are_typed_and_stacks_come_from_the_resolved_entries(tmp_path: Path) -> None:
    analysis = analyze(_fleet(tmp_path, "size_mismatch"))
    root = analysis.findings[analysis.root_cause or 0]
    stacks = root.culprit_stacks()
    assert [rank for rank, _ in stacks] == sorted(root.stacks.culprit or {})
    assert all(isinstance(rank, int) and frames for rank, frames in stacks)
    # the JSON keys them by the rank's text, as documented
    assert sorted(root.frames["culprit"]) == sorted(str(rank) for rank, _ in stacks)
    assert root.stack(root.stacks.majority) == root.frames["majority"]


def test_resolution_returns_new_findings(tmp_path: Path) -> None:
    with open_session(_fleet(tmp_path, "size_mismatch")) as session:
        resolved = session.analysis.findings
        unresolved = [replace(f, entries={}) for f in resolved]
        incident = session.incident
        again = resolve_entries(session.connection, incident.job, incident.incident, unresolved)
    assert all(not f.entries for f in unresolved), "the inputs are left as they were"
    assert [f.evidence for f in again] == [f.evidence for f in resolved]
    refs = {ref for f in again for ref in f.refs()}
    assert refs and all(isinstance(ref, EntryRef) for ref in refs)
    # only the entries the findings show are read
    assert set(again[0].entries) <= refs


def test_a_sentence_names_a_few_ranks_and_counts_the_rest() -> None:
    assert ranks_words([3]) == "rank 3"
    assert ranks_words([1, 3]) == "ranks 1, 3"
    many = list(range(0, 8 * 4096, 8))
    words = ranks_words(many)
    assert words.startswith("ranks 0, 8, 16, ")
    assert words.endswith(f" and {4096 - RANKS_IN_WORDS} more")
    assert len(words) < 200  # a 4,096-rank group no longer writes 20 kB into one line
    assert rank_list(many[:RANKS_IN_WORDS]).count(",") == RANKS_IN_WORDS - 1
