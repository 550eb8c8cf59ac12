"""A missing dump never makes an incident healthy, and never gets a present rank blamed.

Every committed real gloo job (``tests/data/gloo_*``, ``tests/data/workload_*``) is
analysed once per rank with that rank's dump deleted, as a partly archived incident is.
The rank that left no dump may be named as the suspect, on the evidence of its silence;
a rank that is there is blamed only if the job's ground truth blames it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.analysis import Analysis, analyze
from fr_otel.archive import import_dumps
from fr_otel.cli import main
from tests.fixtures import restore_dump_times

DATA = Path(__file__).resolve().parents[1] / "data"
FIXTURES = sorted(
    p.name
    for p in DATA.iterdir()
    if (p / "scenario.json").is_file()
    and json.loads((p / "scenario.json").read_text())["world"] > 1
)


def _without(tmp_path: Path, name: str, rank: int) -> Path:
    """A copy of fixture ``name`` without rank ``rank``'s dump files (real files)."""
    meta = json.loads((DATA / name / "scenario.json").read_text())
    folder = tmp_path / f"{name}-without-{rank}"
    shutil.copytree(DATA / name, folder)
    for relative in meta["files"][str(rank)].values():
        (folder / relative).unlink()
    restore_dump_times(folder)
    return folder


def _suspects(analysis: Analysis) -> set[int]:
    assert analysis.root_cause is not None
    root = analysis.findings[analysis.root_cause]
    return (
        set(root.culprit_ranks)
        | set(root.evidence.get("candidate_ranks", ()))
        | {r for c in root.evidence.get("candidates", ()) for r in c["ranks"]}
    )


@pytest.mark.parametrize("name", FIXTURES)
def test_a_missing_dump_is_never_healthy_and_never_blames_a_present_rank(
    name: str, tmp_path: Path
) -> None:
    meta = json.loads((DATA / name / "scenario.json").read_text())
    truth = set(meta["scenario"]["culprit_ranks"])
    for rank in range(meta["world"]):
        analysis = analyze(_without(tmp_path, name, rank))
        context = (rank, [(f.kind, f.culprit_ranks, f.summary) for f in analysis.findings])
        assert rank not in analysis.ranks, context
        if rank == meta["world"] - 1 and not analysis.missing_dumps:
            # nothing the other ranks' dumps hold says a higher rank existed (no group
            # lists members, no collective's shape implies more): it cannot be missed
            continue
        assert analysis.missing_dumps == [rank], context
        # a broken incident is never healthy
        assert analysis.findings and analysis.root_cause is not None, context
        # only the ground truth's culprits, or the rank that left no dump, are blamed
        blamed = {r for f in analysis.findings for r in f.culprit_ranks}
        assert blamed <= truth | {rank}, context
        if rank in truth:
            # the culprit left no dump: it is the suspect (by its silence), alone or among
            # the candidates the evidence cannot tell apart
            assert rank in _suspects(analysis), context
        for finding in analysis.findings:
            assert set(finding.waiting_ranks).isdisjoint(finding.culprit_ranks), context


def test_the_skip_is_the_root_even_without_an_innocent_ranks_dump(tmp_path: Path) -> None:
    # without rank 3's dump, gloo's inferred membership drops rank 3 from back_group, and
    # every all_gather there "broke its shape rule" on ranks 1 and 2 (group size 2): the
    # group's own all_gathers say it has 3 members, so the missing one is rank 3
    analysis = analyze(_without(tmp_path, "gloo_skipped_collective", 3))
    assert analysis.missing_dumps == [3]
    (root,) = analysis.findings
    assert (root.kind, root.culprit_ranks) == ("skipped_collective", [1])
    assert (root.group.desc, root.collective_seq_id) == ("default_pg", 7)


def test_the_culprits_silence_makes_it_the_suspect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # rank 1 skipped default_pg #7; without its dump, ranks 0, 2 and 3 all wait in #7,
    # which only rank 1 could complete
    folder = _without(tmp_path, "gloo_skipped_collective", 1)
    analysis = analyze(folder)
    root = analysis.findings[analysis.root_cause or 0]
    assert (root.kind, root.culprit_ranks) == ("silent_rank", [1])
    assert root.evidence["by_silence"] is True and root.evidence["present_ranks"] == [0, 2, 3]
    assert (root.group.desc, root.collective_seq_id) == ("default_pg", 7)
    assert "the evidence is its silence" in root.summary
    assert main(["analyze", str(folder)]) == 1
    assert capsys.readouterr().out.startswith("ROOT CAUSE: every member with a dump")


def _archive_of(tmp_path: Path, name: str) -> Path:
    archive = tmp_path / "archive"
    assert import_dumps([DATA / name], archive=archive, job="j", incident="i").ok
    return archive


@pytest.mark.parametrize("how", ["absent", "zero rows"])
def test_a_rank_file_without_rows_is_a_silent_rank(tmp_path: Path, how: str) -> None:
    # a rank that died before its recorder read anything: its Parquet file is missing, or
    # holds no row; its peers wait in a collective only it could complete
    archive = _archive_of(tmp_path, "gloo_missing_rank")
    [path] = archive.glob("job=j/incident=i/rank-000000.parquet")
    if how == "absent":
        path.unlink()
    else:
        table = pq.read_table(path)
        pq.write_table(table.slice(0, 0), path)
    analysis = analyze(archive)
    assert analysis.missing_dumps == [0] and analysis.ranks == [1, 2]
    root = analysis.findings[analysis.root_cause or 0]
    assert (root.kind, root.culprit_ranks) == ("silent_rank", [0]), root.summary
    assert root.collective_seq_id == 7


def test_a_healthy_job_missing_a_dump_is_unknown_not_healthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # nobody there waits on anything, so nobody is a suspect; but nothing vouches for
    # rank 2 either: exit 1 and say what is unknown
    folder = _without(tmp_path, "workload_data_shuffle_healthy", 2)
    analysis = analyze(folder)
    assert analysis.missing_dumps == [2]  # scatter's source holds one chunk per member
    (finding,) = analysis.findings
    assert (finding.kind, finding.culprit_ranks) == ("silent_rank", [])
    assert "cannot be called healthy" in finding.summary
    assert main(["analyze", str(folder)]) == 1
    assert "No problems found" not in capsys.readouterr().out
