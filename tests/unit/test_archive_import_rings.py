"""``fr-otel import`` of the recorder's ring files: buffers nobody flushed are not lost."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.cli import main
from fr_otel.recorder.ring import ring_base, torch_ring_base
from tests.rings import LEARNED_OP, UNLEARNED_API, write_half_learned, write_ring


def _ring(rings: Path, rank: int, records: int) -> None:
    write_ring(
        ring_base(rings, "train", rank),
        rank=rank,
        world=2,
        job="train",
        seqs=range(1, records + 1),
        running_last=True,
        site=("step", "/job/train.py", 12),
    )


def test_rings_import_under_their_job_and_one_incident(tmp_path: Path) -> None:
    rings = tmp_path / "_rings"
    _ring(rings, 0, 3)
    _ring(rings, 1, 2)
    archive = tmp_path / "archive"
    code = main(["import", str(rings), "--archive", str(archive), "--incident", "crash"])
    assert code == 0
    folder = archive / "job=train" / "incident=crash"
    rows = pq.read_table(folder).to_pylist()
    assert sorted({r["rank"] for r in rows}) == [0, 1]
    last = {r["rank"]: r for r in rows if r["state"] == "started"}
    assert last[0]["collective_seq_id"] == 3 and last[1]["collective_seq_id"] == 2
    assert all(r["call_site"] == "/job/train.py:12 in step" for r in rows)


def test_a_foreign_ring_file_is_named_and_the_rest_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rings = tmp_path / "_rings"
    _ring(rings, 0, 2)
    (rings / "job=train" / "rank-000001.ring").write_bytes(b"not a ring")
    (rings / "job=train" / "rank-000001.meta").write_text("")
    code = main(["import", str(rings), "--archive", str(tmp_path / "a"), "--incident", "x"])
    assert code == 2
    assert "rank-000001.ring: unreadable" in capsys.readouterr().err
    assert (tmp_path / "a" / "job=train" / "incident=x" / "rank-000000.parquet").exists()


def test_a_ranks_torch_ring_is_read_with_its_own_ring_once(tmp_path: Path) -> None:
    """The FR mirror's ring (``_torch/rank-N``) holds what only torch saw: its records
    join the rank's, and it is never imported as a rank of its own."""
    rings = tmp_path / "_rings"
    _ring(rings, 0, 3)
    # DDP's buckets, say: no hook saw them
    write_ring(
        torch_ring_base(ring_base(rings, "train", 0)), rank=0, world=2, job="train", seqs=(4, 5)
    )
    archive = tmp_path / "archive"
    assert main(["import", str(rings), "--archive", str(archive), "--incident", "i"]) == 0
    rows = pq.read_table(archive / "job=train" / "incident=i").to_pylist()
    assert sorted((r["rank"], r["collective_seq_id"]) for r in rows) == [
        (0, s) for s in range(1, 6)
    ]
    assert [
        r["call_site"] is not None for r in sorted(rows, key=lambda r: r["collective_seq_id"])
    ] == [True, True, True, False, False]


def test_analyze_reads_a_ring_folder_as_it_reads_dumps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``fr-otel analyze ARCHIVE/_rings``: before, "no dumps"; rank 1 stopped at #2 while
    rank 0 waits in #3, which only rank 1 could complete."""
    rings = tmp_path / "_rings"
    _ring(rings, 0, 3)
    _ring(rings, 1, 2)
    capsys.readouterr()
    assert main(["analyze", str(rings), "--format", "json"]) == 1
    analysis = json.loads(capsys.readouterr().out)
    root = analysis["findings"][analysis["root_cause"]]
    assert root["culprit_ranks"] == [1], root


def test_the_rings_of_ranks_still_running_are_analysed_as_a_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 1 runs on: its ring holds what it had at its last read, not where it stopped
    (before: 'rank 1 never issued all_reduce #4'). Once its owner is gone without an
    end, the same rings are a post-mortem, and rank 1 is named."""
    rings = tmp_path / "_rings"
    for rank, seqs in ((0, range(1, 6)), (1, range(1, 4))):
        writer = write_ring(
            ring_base(rings, "live", rank),
            rank=rank,
            world=2,
            job="live",
            seqs=seqs,
            close=rank == 0,
        )
    assert main(["analyze", str(rings), "--job", "live"]) == 0, capsys.readouterr()
    writer.close()
    assert main(["analyze", str(rings), "--job", "live"]) == 1, capsys.readouterr()


def _run_rings(rings: Path, run: str) -> None:
    """Two ranks of one run, rank 1 stopped inside its third all_reduce."""
    for rank in range(2):
        write_ring(
            ring_base(rings, "train", rank, run),
            rank=rank,
            world=2,
            job="train",
            seqs=range(1, 4),
            running_last=rank == 1,
            run_id=run,
        )


def test_rings_of_two_runs_of_a_job_become_two_incidents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rings = tmp_path / "_rings"
    for run in ("20261201T070000Z-aaaa1111", "20261201T071500Z-bbbb2222"):
        _run_rings(rings, run)
    archive = tmp_path / "archive"
    assert main(["import", str(rings), "--archive", str(archive), "--incident", "i"]) == 0
    folders = sorted(p.name for p in (archive / "job=train").iterdir())
    assert folders == ["incident=i-aaaa1111", "incident=i-bbbb2222"]
    for folder in folders:
        runs = set(pq.read_table(archive / "job=train" / folder).column("run_id").to_pylist())
        assert len(runs) == 1 and folder.endswith(next(iter(runs))[-8:])
    capsys.readouterr()
    # analysed together they would look like one job: never
    assert main(["analyze", str(rings)]) == 2
    assert "rings of 2 runs" in capsys.readouterr().err


def _incidents(archive: Path) -> dict[str, list[dict[str, object]]]:
    """Each incident folder of job ``train``: its rows, in rank and record order."""
    return {
        folder.name: sorted(
            pq.read_table(folder).to_pylist(), key=lambda r: (r["rank"], r["record_id"])
        )
        for folder in sorted((archive / "job=train").iterdir())
    }


def test_importing_the_same_rings_again_replaces_the_first_import(tmp_path: Path) -> None:
    """Without ``--incident`` the incident is named after the rings, not the time of the
    import: a second import of the same rings lands on the first, row for row (before,
    each import made an incident of its own, its rows dated by the import)."""
    rings = tmp_path / "_rings"
    _run_rings(rings, "20261201T070000Z-aaaa1111")
    archive = tmp_path / "archive"
    assert main(["import", str(rings), "--archive", str(archive)]) == 0
    first = _incidents(archive)
    assert main(["import", str(rings), "--archive", str(archive)]) == 0
    assert _incidents(archive) == first
    [name] = first
    assert len(first[name]) == 6
    # still told apart as rings, and by run, by whoever lists the archive
    assert "-aaaa1111-rings-" in name
    # a copy of the same rings is the same evidence: its rows replace the first's too
    copy = tmp_path / "copy" / "_rings"
    shutil.copytree(rings, copy)
    assert main(["import", str(copy), "--archive", str(archive)]) == 0
    assert list(_incidents(archive)) == [name]
    assert len(_incidents(archive)[name]) == 6

    # another run's rings are other evidence: another incident
    other = tmp_path / "other" / "_rings"
    _run_rings(other, "20261201T071500Z-bbbb2222")
    assert main(["import", str(other), "--archive", str(archive)]) == 0
    incidents = _incidents(archive)
    assert len(incidents) == 2 and len(incidents[name]) == 6
    [second] = set(incidents) - {name}
    assert "-bbbb2222-rings-" in second and len(incidents[second]) == 6


def test_a_rank_that_had_not_learned_torchs_op_yet_takes_its_peers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rank 1 died before a read of torch's FR taught it that gloo runs
    ``reduce_scatter_tensor`` as ``all_reduce``; rank 0 had learned it. Their rows agree on
    the op, and the analysis sees no op mismatch between the same calls."""
    rings = tmp_path / "_rings"
    write_half_learned(rings, "train")
    archive = tmp_path / "archive"
    assert main(["import", str(rings), "--archive", str(archive), "--incident", "x"]) == 0
    rows = pq.read_table(archive / "job=train" / "incident=x").to_pylist()
    assert {(r["rank"], r["op"], r["api"]) for r in rows} == {
        (0, LEARNED_OP, UNLEARNED_API),
        (1, LEARNED_OP, UNLEARNED_API),
    }
    capsys.readouterr()
    main(["analyze", str(rings), "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert "op_type_mismatch" not in {f["kind"] for f in report["findings"]}, report
