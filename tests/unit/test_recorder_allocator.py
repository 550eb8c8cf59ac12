"""The recorder makes pyarrow allocate with the system allocator in a rank, unless the
user chose one (``recorder._system_allocator``; why: its docstring).

Real child processes: a one-rank gloo job installs the recorder, and reports which
allocator pyarrow uses once the recorder's start-up thread has finished.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fr_otel.demo.recorded_job import free_port

_CHILD = """
    import threading
    import torch.distributed as dist
    import fr_otel

    fr_otel.install(archive=ARCHIVE, job="pool")
    dist.init_process_group("gloo", rank=0, world_size=1)
    for thread in threading.enumerate():
        if thread.name == "fr_otel-preload":
            thread.join()
    import pyarrow as pa

    print("POOL", pa.default_memory_pool().backend_name)
    dist.destroy_process_group()
"""


@pytest.mark.parametrize(("chosen", "expected"), [(None, "system"), ("jemalloc", "jemalloc")])
def test_pyarrow_uses_the_system_allocator_unless_the_user_chose(
    tmp_path: Path, chosen: str | None, expected: str
) -> None:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("FR_OTEL_", "TORCH_FR_", "TORCH_NCCL_", "OTEL_", "ARROW_"))
    }
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    if chosen is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = chosen
    code = textwrap.dedent(_CHILD).replace("ARCHIVE", repr(str(tmp_path / "archive")))
    child = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, child.stderr
    assert f"POOL {expected}" in child.stdout.splitlines()
