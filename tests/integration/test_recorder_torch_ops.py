"""The recorder's rows name each op as torch's Flight Recorder does, and the function the
user called beside it: a real 2-rank gloo job under ``fr-otel run``, whose ranks also dump
torch's own FR buffer, compared entry by entry (same group and collective seq).

gloo has no reduce_scatter_tensor of its own: torch runs it as an all_reduce, and its FR
says ``gloo:all_reduce``. An archive can hold a rank's rows from the recorder beside
another's from torch's dumps, and the analyzer compares ops across ranks."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fr_otel.cli import main
from fr_otel.dumps.parse import split_profiling_name
from fr_otel.recorder.ring import read_ring, ring_bases
from fr_otel.recorder.table import ring_table
from tests.jobs import torchrun

pytestmark = pytest.mark.gloo

CALLED = ("reduce_scatter_tensor", "all_gather_into_tensor", "all_to_all_single")

SCRIPT = """\
import json, os, sys, time
import torch, torch.distributed as dist, fr_otel
import torch.distributed._functional_collectives as funcol
from fr_otel.recorder.ring import read_ring

recorder = fr_otel.install()
dist.init_process_group("gloo")
rank, world, out = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), sys.argv[1]
t = torch.ones(4 * world)
for _ in range(2):  # seqs 1-6
    dist.reduce_scatter_tensor(torch.empty(4), t)
    dist.all_gather_into_tensor(torch.empty(4 * world), torch.ones(4))
    dist.all_to_all_single(torch.empty(4 * world), t)
# the watch learns torch's names on its own, within seconds, before any flush (and with
# nothing but hooked calls to read torch's FR for)
started, learned = time.monotonic(), {}
while time.monotonic() - started < 20:
    signatures = read_ring(recorder.ring.base).signatures.values()
    learned = {s.api: s.op for s in signatures if s.api}
    if all(learned.get(api, api) != api for api in __CALLED__):
        break
    time.sleep(0.1)
with open(f"{out}/learned-{rank}.json", "w") as f:
    json.dump({"ops": learned, "after_s": time.monotonic() - started}, f)
funcol.wait_tensor(funcol.all_reduce(torch.ones(4), "sum", dist.group.WORLD))  # seq 7
dist.barrier()  # seq 8
with open(f"{out}/fr-{rank}.pickle", "wb") as f:
    f.write(torch._C._distributed_c10d._dump_fr_trace())
if rank == 0:
    recorder.declare("operator")
dist.barrier()  # rank 1 may flush past it
time.sleep(1)
""".replace("__CALLED__", repr(CALLED))


def _torch_ops(path: Path) -> dict[tuple[str, int], str]:
    """(group name, collective seq) -> profiling name of each collective torch's FR holds."""
    dump = pickle.loads(path.read_bytes())  # torch's own dump, written by this test's job
    return {
        (str(e["process_group"][0]), e["collective_seq_id"]): e["profiling_name"]
        for e in dump["entries"]
        if not e.get("is_p2p")
    }


def _check_against_torch(rows: list[dict[str, Any]], torch_ops: dict[int, Any]) -> None:
    """Every recorder row of a collective: torch's op and profiling name for its (group,
    seq), the function called as api where a hook saw the call, null where none did."""
    hooked = [r for r in rows if r["api"] is not None]
    assert {r["api"] for r in hooked} >= {*CALLED, "barrier"}, rows
    assert any(r["api"] is None and r["op"] == "all_reduce" for r in rows)  # funcol's
    for row in rows:
        profiling_name = torch_ops[row["rank"]][(row["pg_name"], row["collective_seq_id"])]
        assert (row["op"], row["profiling_name"]) == (
            split_profiling_name(profiling_name)[1],
            profiling_name,
        ), row
    called = {(r["api"], r["op"]) for r in hooked}
    assert called == {
        ("reduce_scatter_tensor", "all_reduce"),
        ("all_gather_into_tensor", "all_gather"),
        ("all_to_all_single", "all_to_all"),
        ("barrier", "barrier"),
    }


def test_rows_carry_torch_s_op_and_the_function_called(tmp_path: Path) -> None:
    script = tmp_path / "ops.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    archive = tmp_path / "archive"
    command = [*torchrun(script, 2), str(out)]
    assert main(["run", "--job", "ops", "--archive", str(archive), "--", *command]) == 0
    torch_ops = {rank: _torch_ops(out / f"fr-{rank}.pickle") for rank in range(2)}
    for rank in range(2):
        learned = json.loads((out / f"learned-{rank}.json").read_text())
        # by the watch alone, before the flush
        assert learned["ops"] == {
            "reduce_scatter_tensor": "all_reduce",
            "all_gather_into_tensor": "all_gather",
            "all_to_all_single": "all_to_all",
        }, learned
    # the incident's archive (the flush read torch's FR first)
    [folder] = list((archive / "job=ops").glob("incident=*"))
    flushed = pq.read_table(folder).to_pylist()
    _check_against_torch([r for r in flushed if r["collective_seq_id"] <= 8], torch_ops)
    # the rings, whole, after each rank's end
    bases = list(ring_bases(archive / "_rings", "ops"))
    assert len(bases) == 2
    tables = [
        ring_table(read_ring(base), job="ops", incident="i", dump_time_ns=None) for base in bases
    ]
    rows = pa.concat_tables(tables).to_pylist()
    _check_against_torch([r for r in rows if r["collective_seq_id"] <= 8], torch_ops)
