"""Rules no other test pinned: each test here fails when tools/mutate_rules.py breaks its
rule (the mutant named in the test's comment), and passes on the rule as written."""

from __future__ import annotations

import pickle
from pathlib import Path

from fr_otel.analysis import Analysis, analyze
from fr_otel.analysis.findings import Finding
from tests.fr_dumps import FRAMES, fr_dump, fr_entry, write_pickle
from tests.unit.test_analysis_culprits import _subgroups

Entries = dict[int, list[dict[str, object]]]


def _config(groups: dict[str, tuple[str, list[int]]]) -> dict[str, object]:
    return {
        name: {"name": name, "desc": desc, "ranks": str(ranks)}
        for name, (desc, ranks) in groups.items()
    }


def _analyze(
    tmp_path: Path, entries: Entries, *, groups: dict[str, tuple[str, list[int]]] | None = None
) -> Analysis:
    """Each rank's entries as a pickle dump (ranks without entries leave no dump)."""
    config = _config(groups or {"0": ("default_pg", [0, 1, 2])})
    for rank, mine in entries.items():
        write_pickle(tmp_path / "d" / f"nccl_trace_rank_{rank}", fr_dump(mine, pg_config=config))
    return analyze(tmp_path / "d")


def _sized(
    seq: int, op: str, inputs: list[list[int]], outputs: list[list[int]], **entry: object
) -> dict[str, object]:
    record = fr_entry(record_id=seq - 1, seq=seq, op=op, sizes=inputs, **entry)  # type: ignore[arg-type]
    record["output_sizes"] = outputs
    record["output_dtypes"] = ["Float"] * len(outputs)
    return record


def _of(analysis: Analysis, kind: str, op: str | None = None) -> list[Finding]:
    return [f for f in analysis.findings if f.kind == kind and op in (None, f.op)]


# --- 04_rules.sql: rule_violations


def _unknown_size_group(tmp_path: Path, op: str, inputs: int, outputs: int) -> Analysis:
    # gloo dumps name no members: ranks 1 and 2 hold the front group's entries, and its
    # collective's shape says it has 3 members. Ranks 3 and 4 left no dump: which of them
    # is the third member is unknown, and so is the group's size to check the shape with
    entries: Entries = {r: [_sized(1, "gloo:all_reduce", [[4]], [[4]])] for r in (0, 1, 2, 5)}
    for rank in (1, 2):
        front = _sized(1, f"gloo:{op}", [[inputs]], [[outputs]], pg=("1", "front"))
        front["record_id"] = 1
        entries[rank].append(front)
    groups: dict[str, tuple[str, list[int]]] = {"0": ("default_pg", []), "1": ("front", [])}
    return _analyze(tmp_path, entries, groups=groups)


def test_an_all_gather_in_a_group_of_unknown_size_breaks_no_rule(tmp_path: Path) -> None:
    # sql_all_gather_checked_with_unknown_members: 8 x 3 is not 8 x 2 (the members seen)
    analysis = _unknown_size_group(tmp_path, "all_gather", 8, 24)
    assert _of(analysis, "size_mismatch") == [], [f.summary for f in analysis.findings]


def test_a_reduce_scatter_in_a_group_of_unknown_size_breaks_no_rule(tmp_path: Path) -> None:
    # sql_reduce_scatter_checked_with_unknown_members
    analysis = _unknown_size_group(tmp_path, "reduce_scatter", 24, 8)
    assert _of(analysis, "size_mismatch") == [], [f.summary for f in analysis.findings]


def test_a_gloo_all_reduce_over_a_reduce_scatters_input_breaks_no_rule(tmp_path: Path) -> None:
    # sql_all_reduce_gloo_not_exempt: gloo runs reduce_scatter_tensor as an all_reduce of
    # the whole input (24) into one member's part (8); NCCL's all_reduce is held to it
    gloo = _analyze(
        tmp_path / "g", {r: [_sized(1, "gloo:all_reduce", [[24]], [[8]])] for r in range(3)}
    )
    assert gloo.findings == [], [f.summary for f in gloo.findings]
    nccl = _analyze(
        tmp_path / "n", {r: [_sized(1, "nccl:all_reduce", [[24]], [[8]])] for r in range(3)}
    )
    assert [f.kind for f in nccl.findings] == ["size_mismatch"]


def test_an_entry_that_recorded_no_output_tensor_breaks_no_rule(tmp_path: Path) -> None:
    # sql_entries_without_tensors_checked: no output recorded is no size to compare
    analysis = _analyze(tmp_path, {r: [_sized(1, "nccl:all_reduce", [[8]], [])] for r in range(3)})
    assert analysis.findings == [], [f.summary for f in analysis.findings]


def test_a_shape_rule_broken_by_one_member_names_that_member(tmp_path: Path) -> None:
    # py_shape_rule_always_every_member: rank 2 left no dump, so only ranks 0 and 1 are
    # seen breaking it (a member that differs from its peers is a size mismatch against
    # them instead, which says who)
    entries = {r: [_sized(1, "nccl:_reduce_scatter_base", [[32]], [[8]])] for r in (0, 1)}
    analysis = _analyze(tmp_path, entries)
    (shape,) = [f for f in analysis.findings if "shape rule" in f.summary]
    assert shape.culprit_ranks == [0, 1]
    assert "breaks its shape rule on ranks 0, 1:" in shape.summary, shape.summary


# --- 04_rules.sql: all_to_all_balance, with members that left no dump


def test_a_finished_all_to_all_with_a_silent_member_is_not_weighed(tmp_path: Path) -> None:
    # sql_a2a_silent_member_kept_when_done: it completed, so it balanced, whatever rank 2
    # (no dump) moved
    entries = {r: [_sized(1, "nccl:all_to_all", [[6]], [[9]])] for r in (0, 1)}
    analysis = _analyze(tmp_path, entries)
    assert _of(analysis, "size_mismatch") == [], [f.summary for f in analysis.findings]


def test_one_dump_alone_does_not_say_what_silent_all_to_all_members_moved(
    tmp_path: Path,
) -> None:
    # py_a2a_silent_weighed_on_one_dump: ranks 1 and 2 left no dump; one member's shape is
    # no majority to take theirs from
    entries = {0: [_sized(1, "nccl:all_to_all", [[6]], [[9]], state="started")]}
    analysis = _analyze(tmp_path, entries)
    assert _of(analysis, "size_mismatch") == [], [f.summary for f in analysis.findings]


def test_an_unfinished_all_to_all_that_balances_with_its_silent_member_is_fine(
    tmp_path: Path,
) -> None:
    # py_a2a_silent_balanced_still_found: rank 2 taken to have moved 6 in and 6 out, as
    # ranks 0 and 1 did: the totals balance
    entries = {r: [_sized(1, "nccl:all_to_all", [[6]], [[6]], state="started")] for r in (0, 1)}
    analysis = _analyze(tmp_path, entries)
    assert _of(analysis, "size_mismatch") == [], [f.summary for f in analysis.findings]


# --- rules.py: who is blamed for an all_to_all that does not balance

FOUR = {"0": ("default_pg", [0, 1, 2, 3])}


def _steps(
    tmp_path: Path, steps: list[list[tuple[int, int]]], *, sites: list[int] | None = None
) -> Finding:
    """Each step one all_to_all of 4 ranks, given as each rank's (in, out); the last one
    never finishes. ``sites``: each step's call-site line."""
    entries: Entries = {r: [] for r in range(4)}
    for k, step in enumerate(steps):
        state = "started" if k == len(steps) - 1 else "completed"
        for rank, (i, o) in enumerate(step):
            entry = _sized(k + 1, "nccl:all_to_all", [[i]], [[o]], state=state)
            if sites is not None:
                entry["frames"] = [*FRAMES[:2], {**FRAMES[2], "line": sites[k]}]
            entries[rank].append(entry)
    (finding,) = _of(_analyze(tmp_path, entries, groups=FOUR), "size_mismatch", "all_to_all")
    return finding


def test_the_all_to_all_member_whose_split_changed_is_the_culprit(tmp_path: Path) -> None:
    # py_a2a_changed_split_ignored, py_a2a_output_change_unseen: uneven splits are legal;
    # rank 0 received one element more than last time. Most members' shape (8, 8) would
    # blame ranks 0 and 1
    first = [(4, 4), (4, 4), (8, 8), (8, 8)]
    finding = _steps(tmp_path, [first, [(4, 5), *first[1:]]])
    assert finding.culprit_ranks == [0]
    assert "changed their split sizes" in finding.summary


def test_when_every_all_to_all_member_changed_its_split_the_odd_one_is_blamed(
    tmp_path: Path,
) -> None:
    # py_a2a_every_member_changed_is_blamed: a change everyone made says nothing
    finding = _steps(tmp_path, [[(4, 4)] * 4, [(6, 6), (6, 6), (6, 6), (6, 7)]])
    assert finding.culprit_ranks == [3]


def test_an_all_to_all_split_is_compared_only_with_the_same_call_site(tmp_path: Path) -> None:
    # py_a2a_other_call_site_compared: the all_to_all at line 30 moves other sizes; rank 0
    # changed since line 21's last call, everyone did since line 30's
    first = [(4, 4), (4, 4), (8, 8), (8, 8)]
    steps = [first, [(2, 2)] * 4, [(4, 5), *first[1:]]]
    finding = _steps(tmp_path, steps, sites=[21, 30, 21])
    assert finding.culprit_ranks == [0]


def test_an_all_to_all_with_no_majority_shape_blames_no_one(tmp_path: Path) -> None:
    # py_a2a_tie_resolved_by_order
    finding = _steps(tmp_path, [[(4, 4), (4, 4), (8, 9), (8, 9)]])
    assert finding.culprit_ranks == []
    assert "no member's shape has a majority" in finding.summary


def test_the_all_to_all_member_that_differs_from_the_majority_is_the_culprit(
    tmp_path: Path,
) -> None:
    # py_a2a_majority_blamed
    finding = _steps(tmp_path, [[(4, 4), (4, 4), (4, 4), (4, 6)]])
    assert finding.culprit_ranks == [3]


# --- 04_rules.sql: p2p_pending


def test_a_send_whose_peer_posted_a_send_is_unmatched(tmp_path: Path) -> None:
    # sql_p2p_peer_half_is_the_same_op: two sends to each other never meet; a send and
    # its recv do
    def p2p(name: str) -> dict[str, object]:
        return fr_entry(record_id=0, seq=0, op=name, p2p_seq=1, is_p2p=True, state="started")

    two = {"0": ("default_pg", [0, 1])}
    sends = _analyze(
        tmp_path / "s", {0: [p2p("nccl:send 0->1")], 1: [p2p("nccl:send 1->0")]}, groups=two
    )
    unmatched = _of(sends, "p2p_unmatched")
    assert unmatched and set().union(*(f.absent_ranks for f in unmatched)) == {0, 1}
    matched = _analyze(
        tmp_path / "m", {0: [p2p("nccl:send 0->1")], 1: [p2p("nccl:recv 1<-0")]}, groups=two
    )
    assert _of(matched, "p2p_unmatched") == [], [f.summary for f in matched.findings]


# --- divergence.py: the kind of a mismatch


def test_another_op_with_another_dtype_is_an_op_type_mismatch(tmp_path: Path) -> None:
    # py_dtype_checked_before_op: a broadcast of doubles where the others all_reduce floats
    entries = {r: [_sized(1, "nccl:all_reduce", [[8]], [[8]])] for r in (0, 1)}
    odd = _sized(1, "nccl:broadcast", [[8]], [[8]])
    odd["input_dtypes"] = odd["output_dtypes"] = ["Double"]
    entries[2] = [odd]
    (finding,) = _analyze(tmp_path, entries).findings
    assert (finding.kind, finding.culprit_ranks) == ("op_type_mismatch", [2])


# --- rootcause.py: ordering by time


def test_of_two_causes_no_rank_shares_the_earlier_by_far_is_the_root(tmp_path: Path) -> None:
    # rc_time_order_reversed: groups a ([0, 1]) and b ([2, 3]) share no rank and have no
    # replicas; b's broken reduce_scatter came a second before a's. Without the times,
    # what they name would put a first
    def broken(rank: int) -> list[dict[str, object]]:
        pg = ("1", "grp_a") if rank < 2 else ("2", "grp_b")
        entry = _sized(1, "nccl:_reduce_scatter_base", [[32]], [[8]], pg=pg)
        if rank < 2:
            entry["time_created_ns"] += 1_000_000_000  # type: ignore[operator]
        return [entry]

    groups = {"1": ("grp_a", [0, 1]), "2": ("grp_b", [2, 3])}
    analysis = _analyze(tmp_path, {r: broken(r) for r in range(4)}, groups=groups)
    root = analysis.findings[analysis.root_cause or 0]
    assert (root.kind, root.group.desc) == ("size_mismatch", "grp_b")


def test_a_wait_cycle_whose_collectives_were_far_apart_is_ordered_by_time(tmp_path: Path) -> None:
    # rc_far_times_never_count: the cycle no rank orders (test_analysis_culprits'
    # test_a_wait_cycle_no_evidence_orders_is_ambiguous), its default-group collectives
    # moved a second later: rank 1 was absent from the pair all_reduce first
    folder = _subgroups(tmp_path, drop_replica_pair=True)
    for path in folder.glob("comm_lib_trace_rank_*"):
        dump = pickle.loads(path.read_bytes())
        for entry in dump["entries"]:
            if entry["process_group"][1] == "default_pg":
                for key in ("time_created_ns", "time_discovered_started_ns"):
                    if entry.get(key):
                        entry[key] += 1_000_000_000
                if entry.get("time_discovered_completed_ns"):
                    entry["time_discovered_completed_ns"] += 1_000_000_000
        path.write_bytes(pickle.dumps(dump))
    analysis = analyze(folder)
    root = analysis.findings[analysis.root_cause or 0]
    assert (root.kind, root.culprit_ranks, root.group.ranks) == ("missing_rank", [3], (1, 3))
    [before] = root.evidence["came_before"]
    assert before["basis"] == "time"


# --- rootcause.py: a silence beside evidence


def test_a_silence_is_no_cause_beside_a_finding_with_evidence(tmp_path: Path) -> None:
    # rc_silence_beside_evidence_is_a_cause: rank 2 never issued grp_a's second
    # all_reduce (its dump says so); ranks 3 and 4 wait in grp_b's for rank 5, which left
    # no dump. The silence is no second suspect beside the rank the evidence blames
    def all_reduce(seq: int, pg: tuple[str, str], state: str = "completed") -> dict[str, object]:
        return _sized(seq, "nccl:all_reduce", [[8]], [[8]], pg=pg, state=state)

    a, b = ("1", "grp_a"), ("2", "grp_b")
    entries: Entries = {r: [all_reduce(1, a), all_reduce(2, a, "started")] for r in (0, 1)}
    entries[2] = [all_reduce(1, a)]
    entries |= {r: [all_reduce(1, b, "started")] for r in (3, 4)}
    groups = {"1": ("grp_a", [0, 1, 2]), "2": ("grp_b", [3, 4, 5])}
    analysis = _analyze(tmp_path, entries, groups=groups)
    root = analysis.findings[analysis.root_cause or 0]
    assert (root.kind, root.culprit_ranks) == ("missing_rank", [2])
    (silence,) = _of(analysis, "silent_rank")
    assert silence.culprit_ranks == [] and silence.consequence_of == analysis.root_cause
