"""``fr-otel import`` of the recorder's ring files: buffers nobody flushed are not lost."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.cli import main
from fr_otel.recorder.ring import COMPLETED, STARTED, GroupInfo, RingWriter, Signature, ring_base

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
