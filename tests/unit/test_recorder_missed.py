"""Continuous mode says at exit how many collectives torch's Flight Recorder overwrote
before the recorder read them (no span exists for those).

Real one-rank gloo children in continuous mode issue functional collectives, which only
torch's FR sees; with a buffer of 8 entries and a burst of 300, most are overwritten
between two reads of the watch. The OTLP endpoint is a closed port: spans go to the spool,
which is not what these tests look at (the spool is in the archive).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from fr_otel.demo.recorded_job import free_port
from tests.jobs import one_rank_child

_CHILD = """
    import torch, torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    import fr_otel

    fr_otel.install(mode="continuous", archive=ARCHIVE, job="missed")
    dist.init_process_group("gloo", rank=0, world_size=1)
    tensor = torch.ones(4)
    for _ in range(CALLS):
        funcol.wait_tensor(funcol.all_reduce(tensor, "sum", dist.group.WORLD))
    dist.destroy_process_group()
"""


def _run(tmp_path: Path, calls: int, buffer: int | None) -> subprocess.CompletedProcess[str]:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    if buffer is not None:
        env["TORCH_FR_BUFFER_SIZE"] = str(buffer)
    code = _CHILD.replace("ARCHIVE", repr(str(tmp_path / "archive"))).replace("CALLS", str(calls))
    return one_rank_child(code, **env)


_WARNING = re.compile(r"torch's Flight Recorder overwrote (\d+) collectives before")


@pytest.mark.parametrize(("calls", "buffer", "warned"), [(300, 8, True), (20, None, False)])
def test_collectives_torch_overwrote_unread_are_reported_at_exit(
    tmp_path: Path, calls: int, buffer: int | None, warned: bool
) -> None:
    child = _run(tmp_path, calls, buffer)
    found = _WARNING.search(child.stderr)
    assert (found is not None) == warned, child.stderr[-3000:]
    if found is not None:
        assert int(found.group(1)) > 0
