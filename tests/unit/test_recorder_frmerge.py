"""GPU-side state from torch's FR buffer merged into the recorder's queued (NCCL) rows.

The recorder's rows come from a real ring (``RingWriter``); the FR buffer is a pickle
with the fields NCCL writes (no NCCL here to produce one; ``tests/gpu/check_nccl.py``
checks the real thing on a GPU machine).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa

from fr_otel.recorder.frmerge import fr_states, merge_gpu_state
from fr_otel.recorder.ring import GroupInfo, RingWriter, Signature
from fr_otel.recorder.slot import COMPLETED, SCHEDULED
from fr_otel.recorder.table import ring_table
from tests.fr_dumps import fr_dump, fr_entry

GROUP = GroupInfo(name="0", desc="default_pg", ranks=(0, 1), backend="nccl", timeout_ms=600_000)


def _signature(op: str, backend: str) -> Signature:
    return Signature(
        op=op,
        input_sizes=[[4, 8]],
        output_sizes=[[4, 8]],
        input_dtypes=["Float"],
        output_dtypes=["Float"],
        is_p2p=False,
        backend=backend,
    )


def _rows(tmp_path: Path) -> pa.Table:
    writer = RingWriter(
        tmp_path / "rank-000000", capacity=16, rank=0, world=2, job="j", backend="nccl"
    )
    group = writer.intern_group("g", GROUP)
    nccl = writer.intern_signature("a", _signature("all_reduce", "nccl"))
    gloo = writer.intern_signature("b", _signature("all_reduce", "gloo"))
    site = writer.intern_site("s", [("train", "/job/train.py", 7)])
    for seq in (1, 2, 3):
        writer.begin(group, seq, 0, nccl, site, -1, SCHEDULED)
    cpu = writer.begin(group, 4, 0, gloo, site, -1, SCHEDULED)
    writer.finish(cpu, COMPLETED)
    table = ring_table(writer.snapshot(), job="j", incident="i", dump_time_ns=1)
    writer.close()
    return table


def test_queued_rows_take_the_gpu_state_fr_saw(tmp_path: Path) -> None:
    dump = fr_dump(
        [
            fr_entry(record_id=0, seq=1, state="completed"),
            fr_entry(record_id=1, seq=2, state="started"),
            # FR's seq 3 is another op: the recorder's row must not take its state
            fr_entry(record_id=2, seq=3, op="nccl:broadcast", state="completed"),
        ]
    )
    merged = merge_gpu_state(_rows(tmp_path), pickle.dumps(dump))
    by_seq = {row["collective_seq_id"]: row for row in merged.to_pylist()}
    assert by_seq[1]["state"] == "completed" and by_seq[1]["retired"] is True
    assert by_seq[1]["time_completed_ns"] == 1_700_000_000_000_000_200
    assert by_seq[1]["duration_ms"] == 0.5
    assert by_seq[2]["state"] == "started" and by_seq[2]["time_completed_ns"] is None
    assert by_seq[3]["state"] == "scheduled"  # op differs: left alone
    assert by_seq[4]["state"] == "completed" and by_seq[4]["backend"] == "gloo"
    assert merged.schema == _rows(tmp_path / "again").schema


def test_no_dump_or_an_unreadable_one_changes_nothing(tmp_path: Path) -> None:
    rows = _rows(tmp_path)
    assert merge_gpu_state(rows, None).equals(rows)
    assert merge_gpu_state(rows, b"\x80\x04not a pickle").equals(rows)
    # a pickle that names a global is refused by the safe unpickler, not run
    assert fr_states(pickle.dumps({"version": "2.10", "pg_config": {}, "e": Path("/")})) == {}
