"""Analyzer cases built by hand: shape rules fr_trace misses, ties, bad input, SQL views."""

from __future__ import annotations

from pathlib import Path

import pytest

from fr_otel.analysis import analyze
from fr_otel.archive import import_dumps
from fr_otel.cli import main
from fr_otel.errors import ArchiveError
from fr_otel.schema import ALL_GATHER_OPS
from tests.fr_dumps import fr_dump, fr_entry, write_pickle

CONFIG3 = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}}


def _job(tmp_path: Path, entries_by_rank: dict[int, list[dict[str, object]]]) -> Path:
    for rank, entries in entries_by_rank.items():
        write_pickle(
            tmp_path / "d" / f"nccl_trace_rank_{rank}", fr_dump(entries, pg_config=CONFIG3)
        )  # type: ignore[arg-type]
    return tmp_path / "d"


def test_all_gather_base_numel_rule_is_checked(tmp_path: Path) -> None:
    # fr_trace's rule names "all_gather_base" and never checks "_all_gather_base"
    def gather(rank: int) -> dict[str, object]:
        entry = fr_entry(record_id=0, seq=1, op="nccl:_all_gather_base", sizes=[[8]])
        entry["output_sizes"] = [[20]]  # 3 ranks x 8 = 24 expected
        return entry

    analysis = analyze(_job(tmp_path, {r: [gather(r)] for r in range(3)}))
    (finding,) = analysis.findings
    assert finding.kind == "size_mismatch" and finding.op == "_all_gather_base"
    assert finding.culprit_ranks == [0, 1, 2]
    assert "group size 3" in finding.summary


def _sized(
    record_id: int, seq: int, op: str, inputs: list[list[int]], outputs: list[list[int]]
) -> dict[str, object]:
    entry = fr_entry(record_id=record_id, seq=seq, op=op, sizes=inputs)
    entry["output_sizes"] = outputs
    return entry


@pytest.mark.parametrize(
    ("op", "inputs", "outputs", "rule"),
    [
        # a reduce_scatter's input holds one output per member: 3 x 8
        ("nccl:_reduce_scatter_base", [[24]], [[8]], None),
        ("nccl:_reduce_scatter_base", [[32]], [[8]], "input numel must be output numel x"),
        ("nccl:_reduce_scatter_base", [[16]], [[8]], "input numel must be output numel x"),
        ("nccl:reduce_scatter_tensor_coalesced", [[24]], [[8]], None),
        ("nccl:all_reduce", [[4, 8]], [[4, 8]], None),
        ("nccl:all_reduce", [[8]], [[4]], "input and output sizes must be equal"),
        ("nccl:allreduce_coalesced", [[8], [2]], [[8], [3]], "input and output sizes must be"),
    ],
)
def test_each_shape_rule_names_what_breaks_it_and_nothing_else(
    tmp_path: Path, op: str, inputs: list[list[int]], outputs: list[list[int]], rule: str | None
) -> None:
    # every member records the same sizes: no member differs from the others, so only the
    # entry's own shape rule can find anything
    analysis = analyze(_job(tmp_path, {r: [_sized(0, 1, op, inputs, outputs)] for r in range(3)}))
    if rule is None:
        assert analysis.findings == []
        return
    (finding,) = analysis.findings
    assert finding.kind == "size_mismatch" and finding.culprit_ranks == [0, 1, 2]
    assert f"breaks its shape rule on every member: {rule}" in finding.summary


def test_of_two_causes_in_one_group_the_earlier_collective_is_the_root(tmp_path: Path) -> None:
    # both slots break their shape rule on every member: their sequence numbers alone
    # say which came first (record ids and times are given against them, so that only
    # the sequence numbers can order them)
    def entries(rank: int) -> list[dict[str, object]]:
        late = _sized(0, 2, "nccl:all_reduce", [[8]], [[4]])
        early = _sized(1, 1, "nccl:_reduce_scatter_base", [[32]], [[8]])
        return [late, early]

    analysis = analyze(_job(tmp_path, {r: entries(r) for r in range(3)}))
    first, second = analysis.findings
    assert analysis.root_cause == 0
    assert (first.op, first.collective_seq_id) == ("_reduce_scatter_base", 1)
    assert (second.op, second.collective_seq_id) == ("all_reduce", 2)


@pytest.mark.parametrize("op", sorted(ALL_GATHER_OPS))
def test_every_all_gather_name_is_held_to_the_all_gather_rule(tmp_path: Path, op: str) -> None:
    # NCCL's _allgather_base among them: 3 members' output holds 3 inputs of 8
    entries = {
        r: [_sized(0, 1, f"nccl:{op}", [[8]], [[24]]), _sized(1, 2, f"nccl:{op}", [[8]], [[20]])]
        for r in range(3)
    }
    (finding,) = analyze(_job(tmp_path, entries)).findings
    assert (finding.kind, finding.op, finding.collective_seq_id) == ("size_mismatch", op, 2)
    assert "output numel must be input numel x group size (group size 3)" in finding.summary


def test_a_tie_is_ambiguous_not_resolved_by_file_order(tmp_path: Path) -> None:
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}
    a = fr_entry(record_id=0, seq=1, sizes=[[8]], state="started")
    b = fr_entry(record_id=0, seq=1, sizes=[[9]], state="started")
    write_pickle(tmp_path / "d" / "nccl_trace_rank_0", fr_dump([a], pg_config=config))
    write_pickle(tmp_path / "d" / "nccl_trace_rank_1", fr_dump([b], pg_config=config))
    (finding,) = analyze(tmp_path / "d").findings
    assert finding.kind == "size_mismatch"
    assert finding.culprit_ranks == [] and finding.evidence["ambiguous"] is True


def test_unusable_input_is_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "rank_0").write_bytes(b"not a dump")
    assert main(["analyze", str(tmp_path / "junk")]) == 2
    err = capsys.readouterr().err
    assert "rank_0: foreign:" in err and len(err.strip().splitlines()) == 1
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ArchiveError):
        analyze(empty)


def test_sql_views(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    entries = {
        r: [fr_entry(record_id=i, seq=i + 1) for i in range(3 if r != 2 else 2)] for r in range(3)
    }
    archive = tmp_path / "arc"
    assert import_dumps([_job(tmp_path, entries)], archive=archive, incident="x").ok
    assert (
        main(
            [
                "sql",
                str(archive),
                "SELECT collective_seq_id, joined, not_joined FROM collectives ORDER BY 1",
                "--format",
                "csv",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "collective_seq_id,joined,not_joined"
    assert out[-1] == '3,"[0, 1]",[2]'
    assert (
        main(["sql", str(archive), "SELECT kind, culprit_ranks FROM findings", "--format", "json"])
        == 0
    )
    assert '"kind": "missing_rank", "culprit_ranks": [2]' in capsys.readouterr().out
