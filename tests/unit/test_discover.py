"""Dump file naming as real jobs write it."""

from __future__ import annotations

from pathlib import Path

import pytest

from fr_otel.dumps.discover import discover, parse_dump_name


@pytest.mark.parametrize(
    ("relative", "rank", "quorum"),
    [
        ("nccl_trace_rank_12", 12, None),
        ("comm_lib_trace_rank_3", 3, None),
        ("comm_traces/rank_7", 7, None),
        ("dumps/rank_7.json", 7, None),
        ("dumps/comm_lib_trace_rank_0.pkl", 0, None),
        ("comm_lib_trace_quorum_5/2", 2, "5"),
        ("out/nccl_trace_rank_host-a12_9", 9, None),
        ("README.md", None, None),
    ],
)
def test_rank_and_quorum_from_name(relative: str, rank: int | None, quorum: str | None) -> None:
    dump = parse_dump_name(Path("/x") / relative)
    assert (dump.rank, dump.quorum) == (rank, quorum)


def test_directories_globs_and_missing_paths(tmp_path: Path) -> None:
    for name in ("a/rank_0", "a/rank_1.json", "a/notes.txt", "a/.rank_5.tmp", "b/rank_2"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    found = discover(
        [tmp_path / "a", str(tmp_path / "b" / "rank_*"), tmp_path / "nope", str(tmp_path / "z*")]
    )
    assert [f.path.name for f in found.files] == ["rank_0", "rank_1.json", "rank_2"]
    assert found.missing == [str(tmp_path / "nope"), str(tmp_path / "z*")]


def test_explicit_file_is_taken_even_with_a_bad_name(tmp_path: Path) -> None:
    odd = tmp_path / "trace.bin"
    odd.write_text("x")
    found = discover([odd, odd])
    assert [(f.path, f.rank) for f in found.files] == [(odd, None)]


def test_one_file_named_several_ways_is_listed_once(tmp_path: Path) -> None:
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    (dumps / "rank_0").write_text("x")
    (dumps / "rank_1").write_text("y")
    (tmp_path / "via").symlink_to(dumps)
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "rank_1").hardlink_to(dumps / "rank_1")
    found = discover([dumps, tmp_path / "via", tmp_path / "via" / "rank_0", tmp_path / "linked"])
    assert [f.path for f in found.files] == [dumps / "rank_0", dumps / "rank_1"]


def test_job_and_incident_from_the_folders_the_recorder_saves_dumps_in() -> None:
    saved = "/a/_fr_dumps/job=titan/run=20261201T070000Z-aaaa1111/incident=i-1/"
    dump = parse_dump_name(Path(saved + "comm_lib_trace_rank_3"))
    assert (dump.rank, dump.job, dump.incident) == (3, "titan", "i-1")
    # the innermost folder of each; a name that only ends in job= is no such folder
    dump = parse_dump_name(Path("job=a/incident=b/job=c/myjob=d/rank_0"))
    assert (dump.job, dump.incident) == ("c", "b")
    assert parse_dump_name(Path("dumps/rank_0")).job is None
