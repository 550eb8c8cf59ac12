"""``fr-otel import`` of the recorder's ring files: buffers nobody flushed are not lost."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.cli import main
from fr_otel.recorder.ring import (
    COMPLETED,
    STARTED,
    GroupInfo,
    RingWriter,
    Signature,
    ring_base,
    torch_ring_base,
)

GROUP = GroupInfo(name="0", desc="default_pg", ranks=(0, 1), backend="gloo", timeout_ms=5000)
SIGNATURE = Signature(
    op="all_reduce",
    input_sizes=[[8]],
    output_sizes=[[8]],
    input_dtypes=["Float"],
    output_dtypes=["Float"],
    is_p2p=False,
)


def _ring(rings: Path, rank: int, records: int) -> None:
    writer = RingWriter(
        ring_base(rings, "train", rank), capacity=8, rank=rank, world=2, job="train", backend="gloo"
    )
    group = writer.intern_group("g", GROUP)
    signature = writer.intern_signature("s", SIGNATURE)
    site = writer.intern_site("x", [("step", "/job/train.py", 12)])
    for seq in range(1, records + 1):
        record = writer.begin(group, seq, 0, signature, site, -1, STARTED)
        if seq < records:
            writer.finish(record, COMPLETED)
    writer.close()


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
    torch_ring = RingWriter(
        torch_ring_base(ring_base(rings, "train", 0)),
        capacity=8,
        rank=0,
        world=2,
        job="train",
        backend="gloo",
    )
    group = torch_ring.intern_group("g", GROUP)
    signature = torch_ring.intern_signature("s", SIGNATURE)
    for seq in (4, 5):  # DDP's buckets, say: no hook saw them
        torch_ring.finish(torch_ring.begin(group, seq, 0, signature, -1, -1, STARTED), COMPLETED)
    torch_ring.close()
    archive = tmp_path / "archive"
    assert main(["import", str(rings), "--archive", str(archive), "--incident", "i"]) == 0
    rows = pq.read_table(archive / "job=train" / "incident=i").to_pylist()
    assert sorted((r["rank"], r["collective_seq_id"]) for r in rows) == [
        (0, s) for s in range(1, 6)
    ]
    assert [
        r["call_site"] is not None for r in sorted(rows, key=lambda r: r["collective_seq_id"])
    ] == [True, True, True, False, False]
