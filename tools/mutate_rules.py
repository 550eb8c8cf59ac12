"""Every detection and root-cause ordering rule of the analyzer is pinned by a test.

Each mutant below breaks one rule in a scratch copy of the repository (src/, tests/ and
pyproject.toml; /work/main's own files are never touched) and runs only that rule's
tests. A mutant is *killed* when some test fails, and *SURVIVED* when they all pass: the
rule could be broken without any test noticing. A mutant whose old text is not found
exactly once is *stale*: the code moved, and the mutant must be rewritten, or it would
go on "passing" while pinning nothing. Survivors, stale mutants and errors (the tests
could not run) make the exit status non-zero.

The listed tests first run once on the unbroken copy: a test that fails there would
"kill" every mutant that lists it without saying anything about the rule.

    .venv/bin/python tools/mutate_rules.py            # every mutant, on the working tree
    .venv/bin/python tools/mutate_rules.py --rev HEAD # on a commit instead
    .venv/bin/python tools/mutate_rules.py -k a2a     # mutants whose name contains a2a
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COPIED = ("src", "tests", "pyproject.toml")
TIMEOUT_S = 600

RULES_SQL = "src/fr_otel/analysis/sql/04_rules.sql"
RULES_PY = "src/fr_otel/analysis/rules.py"
DIVERGENCE = "src/fr_otel/analysis/divergence.py"
ROOTCAUSE = "src/fr_otel/analysis/rootcause.py"

SHAPE = (
    "tests/unit/test_analysis_rules.py::test_each_shape_rule_names_what_breaks_it_and_nothing_else"
)
PINNED = "tests/unit/test_analysis_rules_pinned.py"


@dataclass(frozen=True, kw_only=True, slots=True)
class Mutant:
    """One rule broken: ``old`` (found exactly once in ``file``) replaced by ``new``."""

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTANTS = (
    # --- 04_rules.sql: rule_violations (each entry's own shape rule)
    Mutant(
        name="sql_reduce_scatter_size_turned_around",
        file=RULES_SQL,
        old="AND e.in_numel <> e.out_numel * g.size",
        new="AND e.out_numel <> e.in_numel * g.size",
        tests=(SHAPE,),
    ),
    Mutant(
        name="sql_all_reduce_equal_sizes_disabled",
        file=RULES_SQL,
        old="OR (list_contains($all_reduce_ops, e.op) AND NOT e.gloo AND NOT e.sizes_equal)",
        new="OR (false AND list_contains($all_reduce_ops, e.op))",
        tests=(SHAPE,),
    ),
    Mutant(
        name="sql_all_gather_size_disabled",
        file=RULES_SQL,
        old="AND e.out_numel <> e.in_numel * g.size",
        new="AND e.out_numel < 0",
        tests=(
            "tests/unit/test_analysis_rules.py::test_all_gather_base_numel_rule_is_checked",
            "tests/unit/test_analysis_rules.py::test_every_all_gather_name_is_held_to_the_all_gather_rule",
        ),
    ),
    Mutant(
        name="sql_all_gather_gloo_first_chunk_not_exempt",
        file=RULES_SQL,
        old="AND NOT (e.gloo AND e.out_numel = e.in_numel))",
        new=")",
        tests=(
            "tests/unit/test_analysis_workloads.py::test_functional_all_gather_as_gloo_records_it_breaks_no_shape_rule",
        ),
    ),
    Mutant(
        name="sql_all_gather_checked_with_unknown_members",
        file=RULES_SQL,
        old="(list_contains($all_gather_ops, e.op) AND g.unknown_members = 0",
        new="(list_contains($all_gather_ops, e.op)",
        tests=(f"{PINNED}::test_an_all_gather_in_a_group_of_unknown_size_breaks_no_rule",),
    ),
    Mutant(
        name="sql_reduce_scatter_checked_with_unknown_members",
        file=RULES_SQL,
        old="OR (list_contains($reduce_scatter_ops, e.op) AND g.unknown_members = 0",
        new="OR (list_contains($reduce_scatter_ops, e.op)",
        tests=(f"{PINNED}::test_a_reduce_scatter_in_a_group_of_unknown_size_breaks_no_rule",),
    ),
    Mutant(
        name="sql_all_reduce_gloo_not_exempt",
        file=RULES_SQL,
        old="AND NOT e.gloo AND NOT e.sizes_equal",
        new="AND NOT e.sizes_equal",
        tests=(f"{PINNED}::test_a_gloo_all_reduce_over_a_reduce_scatters_input_breaks_no_rule",),
    ),
    Mutant(
        name="sql_entries_without_tensors_checked",
        file=RULES_SQL,
        old="WHERE NOT e.p2p AND e.in_tensors > 0 AND e.out_tensors > 0",
        new="WHERE NOT e.p2p",
        tests=(f"{PINNED}::test_an_entry_that_recorded_no_output_tensor_breaks_no_rule",),
    ),
    # --- 04_rules.sql: all_to_all_balance
    Mutant(
        name="sql_a2a_balance_disabled",
        file=RULES_SQL,
        old="AND sum(a.in_numel) <> sum(a.out_numel))",
        new="AND false)",
        tests=(
            "tests/unit/test_analysis_culprits.py::test_one_fault_is_one_root_and_one_finding_per_consequence[all_to_all_splits]",
        ),
    ),
    Mutant(
        name="sql_a2a_silent_member_kept_when_done",
        file=RULES_SQL,
        old="AND NOT bool_and(a.done))",
        new="AND true)",
        tests=(f"{PINNED}::test_a_finished_all_to_all_with_a_silent_member_is_not_weighed",),
    ),
    Mutant(
        name="sql_a2a_silent_member_never_weighed",
        file=RULES_SQL,
        old="AND NOT bool_and(a.done))",
        new="AND false)",
        tests=(
            "tests/unit/test_analysis_missing.py::test_an_all_to_all_that_cannot_balance_without_a_members_dump",
        ),
    ),
    # --- 04_rules.sql: p2p_pending
    Mutant(
        name="sql_p2p_peer_half_is_the_same_op",
        file=RULES_SQL,
        old="AND NOT r.done AND r.op = CASE s.op WHEN 'send' THEN 'recv' ELSE 'send' END",
        new="AND NOT r.done AND r.op = s.op",
        tests=(f"{PINNED}::test_a_send_whose_peer_posted_a_send_is_unmatched",),
    ),
    # --- rules.py: shape findings and all_to_all culprits
    Mutant(
        name="py_shape_rule_always_every_member",
        file=RULES_PY,
        old="everyone=set(ranks) >= set(group.ranks or ()),",
        new="everyone=True,",
        tests=(f"{PINNED}::test_a_shape_rule_broken_by_one_member_names_that_member",),
    ),
    Mutant(
        name="py_a2a_changed_split_ignored",
        file=RULES_PY,
        old="if 0 < len(changed) < len(per_rank):",
        new="if False:",
        tests=(f"{PINNED}::test_the_all_to_all_member_whose_split_changed_is_the_culprit",),
    ),
    Mutant(
        name="py_a2a_every_member_changed_is_blamed",
        file=RULES_PY,
        old="if 0 < len(changed) < len(per_rank):",
        new="if 0 < len(changed):",
        tests=(
            f"{PINNED}::test_when_every_all_to_all_member_changed_its_split_the_odd_one_is_blamed",
        ),
    ),
    Mutant(
        name="py_a2a_output_change_unseen",
        file=RULES_PY,
        old="AND (prev.in_numel <> cur.in_numel OR prev.out_numel <> cur.out_numel)",
        new="AND prev.in_numel <> cur.in_numel",
        tests=(f"{PINNED}::test_the_all_to_all_member_whose_split_changed_is_the_culprit",),
    ),
    Mutant(
        name="py_a2a_other_call_site_compared",
        file=RULES_PY,
        old="AND p.site IS NOT DISTINCT FROM cur.site",
        new="",
        tests=(f"{PINNED}::test_an_all_to_all_split_is_compared_only_with_the_same_call_site",),
    ),
    Mutant(
        name="py_a2a_tie_resolved_by_order",
        file=RULES_PY,
        old="elif rest and rest[0][1] == usual_n:\n            culprits = []",
        new="elif False:\n            culprits = []",
        tests=(f"{PINNED}::test_an_all_to_all_with_no_majority_shape_blames_no_one",),
    ),
    Mutant(
        name="py_a2a_majority_blamed",
        file=RULES_PY,
        old='culprits = sorted(r["rank"] for r in per_rank if (r["i"], r["o"]) != usual)',
        new='culprits = sorted(r["rank"] for r in per_rank if (r["i"], r["o"]) == usual)',
        tests=(
            "tests/unit/test_analysis_culprits.py::test_one_fault_is_one_root_and_one_finding_per_consequence[all_to_all_splits]",
            f"{PINNED}::test_the_all_to_all_member_that_differs_from_the_majority_is_the_culprit",
        ),
    ),
    Mutant(
        name="py_a2a_silent_weighed_on_one_dump",
        file=RULES_PY,
        old="if usual_n < 2 or (rest and rest[0][1] == usual_n):",
        new="if rest and rest[0][1] == usual_n:",
        tests=(f"{PINNED}::test_one_dump_alone_does_not_say_what_silent_all_to_all_members_moved",),
    ),
    Mutant(
        name="py_a2a_silent_balanced_still_found",
        file=RULES_PY,
        old="if total_in == total_out:\n                continue",
        new="pass",
        tests=(
            f"{PINNED}::test_an_unfinished_all_to_all_that_balances_with_its_silent_member_is_fine",
        ),
    ),
    # --- divergence.py: the kind of a mismatch against the majority
    Mutant(
        name="py_op_type_mismatch_never_named",
        file=DIVERGENCE,
        old='if slot.ops != reference.ops:\n        return "op_type_mismatch"',
        new='if False:\n        return "op_type_mismatch"',
        tests=(
            "tests/unit/test_analysis_sim.py::test_root_cause_matches_ground_truth[16-0-op_type_mismatch]",
        ),
    ),
    Mutant(
        name="py_dtype_mismatch_never_named",
        file=DIVERGENCE,
        old='if slot.dsig != reference.dsig:\n        return "dtype_mismatch"',
        new='if False:\n        return "dtype_mismatch"',
        tests=(
            "tests/unit/test_analysis_sim.py::test_root_cause_matches_ground_truth[16-0-dtype_mismatch]",
        ),
    ),
    Mutant(
        name="py_dtype_checked_before_op",
        file=DIVERGENCE,
        old=(
            'if slot.ops != reference.ops:\n        return "op_type_mismatch"\n'
            '    if slot.dsig != reference.dsig:\n        return "dtype_mismatch"'
        ),
        new=(
            'if slot.dsig != reference.dsig:\n        return "dtype_mismatch"\n'
            '    if slot.ops != reference.ops:\n        return "op_type_mismatch"'
        ),
        tests=(f"{PINNED}::test_another_op_with_another_dtype_is_an_op_type_mismatch",),
    ),
    # --- rootcause.py: how causes are ordered, and which findings are causes
    Mutant(
        name="rc_sequence_order_reversed",
        file=ROOTCAUSE,
        old='return Order(-1 if a.collective_seq_id < b.collective_seq_id else 1, "sequence")',
        new='return Order(-1 if a.collective_seq_id > b.collective_seq_id else 1, "sequence")',
        tests=(
            "tests/unit/test_analysis_rules.py::test_of_two_causes_in_one_group_the_earlier_collective_is_the_root",
        ),
    ),
    Mutant(
        name="rc_rank_vote_reversed",
        file=ROOTCAUSE,
        old="votes = sum(1 if pa[r] < pb[r] else -1 for r in pa.keys() & pb.keys())",
        new="votes = sum(1 if pa[r] > pb[r] else -1 for r in pa.keys() & pb.keys())",
        tests=(
            "tests/unit/test_analysis_culprits.py::test_a_cross_group_wait_cycle_is_resolved_by_the_replica_pair",
        ),
    ),
    Mutant(
        name="rc_replicas_never_vote",
        file=ROOTCAUSE,
        old="vote = _vote(self._replica_positions(a), self._replica_positions(b))",
        new="vote = 0",
        tests=(
            "tests/unit/test_analysis_culprits.py::test_a_cross_group_wait_cycle_is_resolved_by_the_replica_pair",
        ),
    ),
    Mutant(
        name="rc_time_order_reversed",
        file=ROOTCAUSE,
        old="sign = -1 if a.time_ns < b.time_ns else 1",
        new="sign = -1 if a.time_ns > b.time_ns else 1",
        tests=(f"{PINNED}::test_of_two_causes_no_rank_shares_the_earlier_by_far_is_the_root",),
    ),
    Mutant(
        name="rc_close_times_count_as_evidence",
        file=ROOTCAUSE,
        old="if gap >= TIME_MARGIN_NS:",
        new="if True:",
        tests=(
            "tests/unit/test_analysis_culprits.py::test_a_wait_cycle_no_evidence_orders_is_ambiguous",
        ),
    ),
    Mutant(
        name="rc_far_times_never_count",
        file=ROOTCAUSE,
        old="if gap >= TIME_MARGIN_NS:",
        new="if False:",
        tests=(f"{PINNED}::test_a_wait_cycle_whose_collectives_were_far_apart_is_ordered_by_time",),
    ),
    Mutant(
        name="rc_absence_beside_divergence_is_a_cause",
        file=ROOTCAUSE,
        old=(
            "causes = {k for i, f in enumerate(ordered) if f.kind not in ABSENCE_KINDS"
            " for k in hits[i]}"
        ),
        new="causes: set[int] = set()",
        tests=(
            "tests/unit/test_analysis_sim.py::test_root_cause_matches_ground_truth[16-0-size_mismatch]",
            "tests/unit/test_analysis_culprits.py::test_one_fault_is_one_root_and_one_finding_per_consequence",
        ),
    ),
    Mutant(
        name="rc_one_stop_many_causes",
        file=ROOTCAUSE,
        old=(
            'if finding.kind == "missing_rank" and finding.absent_ranks <= stopped:\n'
            "                continue"
        ),
        new="pass",
        tests=(
            "tests/unit/test_analysis_workloads.py::test_faulty_workload_names_the_culprit_and_its_group",
            "tests/unit/test_analysis_workloads.py::test_2d_mesh_dp_waits_are_consequences_of_the_tp_culprit",
        ),
    ),
    Mutant(
        name="rc_silence_beside_evidence_is_a_cause",
        file=ROOTCAUSE,
        old='roots = [i for i in roots if ordered[i].kind != "silent_rank"]',
        new="roots = list(roots)",
        tests=(
            "tests/unit/test_analysis_missing.py::test_evidence_in_the_dumps_present_outranks_a_missing_dumps_silence",
            f"{PINNED}::test_a_silence_is_no_cause_beside_a_finding_with_evidence",
        ),
    ),
    Mutant(
        name="rc_silence_outranks_a_stopped_ranks_evidence",
        file=ROOTCAUSE,
        old="roots = _evidence_before_silence(ordered, roots, graph) or roots",
        new="roots = list(roots)",
        tests=(
            "tests/unit/test_analysis_missing.py::test_a_stopped_ranks_evidence_outranks_the_silence_its_peers_seem_to_wait_on",
        ),
    ),
    Mutant(
        name="rc_waiting_ranks_stay_culprits",
        file=ROOTCAUSE,
        old="    if waiting:\n        finding.culprit_ranks",
        new="    if False:\n        finding.culprit_ranks",
        tests=(
            "tests/unit/test_analysis_culprits.py::test_a_cross_group_wait_cycle_is_resolved_by_the_replica_pair",
        ),
    ),
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    mutant: Mutant
    verdict: str
    """``killed``, ``SURVIVED``, ``stale`` or ``error``."""
    seconds: float
    detail: str = ""


def _scratch(rev: str | None, into: Path) -> None:
    """The files the tests need, from the working tree or from ``rev``."""
    if rev is None:
        for name in COPIED:
            src = ROOT / name
            if src.is_dir():
                # stale bytecode would hide a mutant from the tests
                shutil.copytree(src, into / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(src, into / name)
        return
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", rev, *COPIED],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def _pytest(scratch: Path, tests: tuple[str, ...], *, stop_first: bool) -> tuple[int, str]:
    env = dict(os.environ)
    # ahead of the editable install's path (the checkout's src), so the copy is imported
    env["PYTHONPATH"] = str(scratch / "src")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    if stop_first:
        command.insert(4, "-x")
    try:
        done = subprocess.run(
            command, cwd=scratch, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        return -1, f"timed out after {TIMEOUT_S} s"
    lines = (done.stdout + done.stderr).strip().splitlines()
    return done.returncode, lines[-1] if lines else ""


def _run(scratch: Path, mutant: Mutant) -> Outcome:
    start = time.monotonic()
    path = scratch / mutant.file
    original = path.read_text()
    if not mutant.tests:
        # pytest without node ids would run the whole suite (testpaths)
        return Outcome(mutant=mutant, verdict="error", seconds=0.0, detail="no tests listed")
    found = original.count(mutant.old)
    if found != 1:
        return Outcome(
            mutant=mutant, verdict="stale", seconds=0.0, detail=f"old text found {found} times"
        )
    path.write_text(original.replace(mutant.old, mutant.new))
    try:
        code, last = _pytest(scratch, mutant.tests, stop_first=True)
    finally:
        path.write_text(original)
    seconds = time.monotonic() - start
    # pytest: 0 all passed, 1 some failed (-1: it hung, which no unbroken rule does);
    # anything else (usage error, no test collected, a node id that no longer exists)
    # says nothing about the rule
    verdict = {0: "SURVIVED", 1: "killed", -1: "killed"}.get(code, "error")
    return Outcome(mutant=mutant, verdict=verdict, seconds=seconds, detail=last)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", help="test this commit instead of the working tree")
    parser.add_argument("-k", dest="pattern", default="", help="only mutants whose name has this")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unbroken run")
    args = parser.parse_args(argv)
    mutants = [m for m in MUTANTS if args.pattern in m.name]
    if not mutants:
        print(f"no mutant's name contains {args.pattern!r}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mutate_rules_") as tmp:
        scratch = Path(tmp)
        _scratch(args.rev, scratch)
        if not args.no_baseline:
            tests = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
            code, last = _pytest(scratch, tests, stop_first=False)
            print(f"baseline ({len(tests)} test ids, nothing broken): {last}", flush=True)
            if code != 0:
                print("the tests fail on the unbroken code: no mutant can be judged")
                return 1
        outcomes = []
        for mutant in mutants:
            outcome = _run(scratch, mutant)
            outcomes.append(outcome)
            print(
                f"{outcome.verdict:8} {mutant.name:50} {outcome.seconds:6.1f} s  {outcome.detail}",
                flush=True,
            )
    bad = [o for o in outcomes if o.verdict != "killed"]
    print(f"{len(outcomes)} mutants: {len(outcomes) - len(bad)} killed, {len(bad)} not")
    for outcome in bad:
        print(f"  {outcome.verdict}: {outcome.mutant.name} ({outcome.mutant.file})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
