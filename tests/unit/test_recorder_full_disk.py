"""A full disk never takes training down: the ring's space is reserved when it is created,
so a ring that does not fit is an error at start, said once with the path and what is
lost, and the job runs on unrecorded. Before, the ring was a sparse file and the first
write to a page the disk could not back killed the rank with SIGBUS.

A real full filesystem: a 512 KiB tmpfs that the test mounts (CI runs as root)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_JOB = """
import torch, torch.distributed as dist, fr_otel
recorder = fr_otel.install()
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
x = torch.ones(4)
for _ in range(12000):
    dist.all_reduce(x)
# without it, torch's gloo threads can outlive the interpreter: "terminate called without
# an active exception" at exit, once under load in a full test run
dist.destroy_process_group()
print("trained", recorder.stats.recorder_errors)
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_a_ring_that_does_not_fit_is_refused_at_start_and_training_goes_on(
    small_disk: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FR_OTEL_", "OTEL_"))}
    # 20,000 slots of 64 bytes do not fit in 512 KiB (8,192 would)
    env.update(FR_OTEL_ARCHIVE=str(small_disk / "archive"), FR_OTEL_BUFFER_SIZE="20000")
    done = subprocess.run(
        [sys.executable, "-c", _JOB], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "trained 1"
    [warning] = [line for line in done.stderr.splitlines() if "recorder disabled" in line]
    assert str(small_disk / "archive") in warning and "No space left" in warning, warning
    assert "will not be recorded" in warning
