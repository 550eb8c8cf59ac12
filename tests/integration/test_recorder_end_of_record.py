"""Where a rank's record ends, and what it lost in between, are said in its ring, so that
neither looks like a rank that stopped issuing collectives or skipped some.

Real gloo processes. A rank's ring holds what torch's Flight Recorder saw only as of the
recorder's last read of it: the ring must be read once more when the rank ends, whatever
the mode, and say how it ended; and where torch overwrote entries between two reads (its
buffer is made small here, as a fast job's collectives outrun the default one), the ring
says which collectives it lost, and the analysis does not take them for skipped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fr_otel.cli import main
from fr_otel.demo.recorded_job import free_port
from fr_otel.recorder.ring import RingContents, read_ring, ring_bases
from tests.jobs import STEERING, environment, torchrun

pytestmark = pytest.mark.gloo

_BURSTS = """
import time, torch, torch.distributed as dist
import torch.distributed._functional_collectives as funcol

dist.init_process_group("gloo")
rank = dist.get_rank()
tensor = torch.ones(4)
for burst in range(4):
    for _ in range(200):
        funcol.wait_tensor(funcol.all_reduce(tensor, "sum", dist.group.WORLD))
    # the ranks' watches read torch's FR at different moments of the next burst
    time.sleep(1.2 + 0.3 * rank)
dist.destroy_process_group()
"""


def _rings(archive: Path, job: str) -> list[RingContents]:
    return [read_ring(base) for base in ring_bases(archive / "_rings", job)]


def test_collectives_torch_overwrote_between_reads_are_a_gap_not_a_skip(tmp_path: Path) -> None:
    """Functional collectives reach only torch's FR; with 16 entries of it, each burst of
    200 overwrites most before the next read, at a different point on each rank. The
    healthy run analyses as healthy from its rings (before: 'rank 1 skipped all_reduce')."""
    script = tmp_path / "bursts.py"
    script.write_text(_BURSTS)
    archive = tmp_path / "archive"
    with environment({"TORCH_FR_BUFFER_SIZE": "16", "OMP_NUM_THREADS": "1"}):
        code = main(
            ["run", "--job", "bursts", "--archive", str(archive), "--", *torchrun(script, 2)]
        )
    assert code == 0
    rings = _rings(archive, "bursts")
    assert len(rings) == 2
    for contents in rings:
        assert contents.gaps, contents.rank
        names = {i: g.name for i, g in contents.groups.items()}
        held = {s[2] for s in contents.slots if names[s[1]] == "0"}
        for gap in contents.gaps:
            assert gap.group == "0" and gap.first <= gap.last
            # what a gap names is what the ring lacks, and nothing it holds
            assert not held & set(range(gap.first, gap.last + 1)), (contents.rank, gap)
        # the last read, at the end, brought the last collectives: 800 of them
        assert max(held) == 800, contents.rank
        assert contents.ended is not None and contents.ended.how == "exit"
    assert main(["analyze", str(archive), "--job", "bursts"]) == 0


_ENDINGS = {
    "exit": "pass",
    "exception": "raise RuntimeError('boom')",
    "signal": "os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)",
}
_ENDING_CHILD = """
import os, signal, sys, time, torch, torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import fr_otel

fr_otel.install(archive=sys.argv[1], job="ending")
dist.init_process_group("gloo", rank=0, world_size=1)
tensor = torch.ones(4)
for _ in range(5):
    funcol.wait_tensor(funcol.all_reduce(tensor, "sum", dist.group.WORLD))
dist.all_reduce(tensor)
ENDING
"""


@pytest.mark.parametrize(
    ("how", "detail"), [("exit", None), ("exception", "RuntimeError"), ("signal", "SIGTERM")]
)
def test_the_ring_says_how_its_rank_ended_after_reading_torch_s_fr_once_more(
    tmp_path: Path, how: str, detail: str | None
) -> None:
    """Incident mode, where nothing else reads torch's FR at the end: the five functional
    all_reduces, which only torch's FR saw, are in the ring, then the end."""
    code = textwrap.dedent(_ENDING_CHILD).replace("ENDING", _ENDINGS[how])
    env = {k: v for k, v in os.environ.items() if not k.startswith(STEERING)}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    archive = tmp_path / "archive"
    child = subprocess.run(
        [sys.executable, "-c", code, str(archive)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    expected = {"exit": 0, "exception": 1, "signal": -signal.SIGTERM}[how]
    assert child.returncode == expected, child.stderr[-3000:]
    [contents] = _rings(archive, "ending")
    assert contents.ended is not None, child.stderr[-3000:]
    assert (contents.ended.how, contents.ended.detail) == (how, detail)
    names = {i: g.name for i, g in contents.groups.items()}
    assert sorted(s[2] for s in contents.slots if names[s[1]] == "0") == [1, 2, 3, 4, 5, 6]
