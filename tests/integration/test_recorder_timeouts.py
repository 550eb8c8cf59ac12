"""A group's timeout changed at run time (torch's ``_set_pg_timeout``, which torchtitan
calls on every group after its first step) is followed by the recorder: the records after
the change carry the new timeout, their numbering goes on, and an op is overdue by the new
one. Real one-rank gloo children; torchtitan itself runs in ``test_torchtitan.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.jobs import one_rank_child

pytestmark = pytest.mark.gloo

_CHILD = """
    import datetime, json, sys, torch, torch.distributed as dist
    import fr_otel
    from fr_otel.recorder import current
    from fr_otel.recorder.ring import read_ring

    fr_otel.install(archive=sys.argv[1], job="timeouts")
    dist.init_process_group("gloo", rank=0, world_size=1, timeout=datetime.timedelta(seconds=300))
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    dist.distributed_c10d._set_pg_timeout(datetime.timedelta(seconds=20))
    dist.all_reduce(tensor)
    dist.barrier()
    recorder = current()
    contents = read_ring(recorder.ring.base)
    rows = [(s[2], contents.groups[s[1]].timeout_ms) for s in contents.slots]
    detection = {contents.groups[i].timeout_ms: t for i, t in recorder.capture.timeouts_ns.items()}
    print(json.dumps({"rows": rows, "detection": detection}))
    dist.destroy_process_group()
"""


def test_records_after_a_timeout_change_carry_it_and_are_overdue_by_it(tmp_path: Path) -> None:
    child = one_rank_child(_CHILD.replace("sys.argv[1]", repr(str(tmp_path / "archive"))))
    found = json.loads(child.stdout.strip().splitlines()[-1])
    # before: [[1, 300000], [2, 300000], [3, 300000]] and one detection of 225 s
    assert found["rows"] == [[1, 300000], [2, 20000], [3, 20000]]
    assert found["detection"] == {"300000": 225 * 10**9, "20000": 15 * 10**9}
