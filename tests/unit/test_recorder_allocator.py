"""The recorder makes pyarrow allocate with the system allocator in a rank, unless the
user chose one (``recorder._system_allocator``; why: its docstring).

Real child processes: a one-rank gloo job installs the recorder, and reports which
allocator pyarrow uses once the recorder's start-up thread has finished.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.jobs import one_rank_child

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
    env = {"ARROW_DEFAULT_MEMORY_POOL": chosen} if chosen is not None else {}
    child = one_rank_child(_CHILD.replace("ARCHIVE", repr(str(tmp_path / "archive"))), **env)
    assert f"POOL {expected}" in child.stdout.splitlines()
