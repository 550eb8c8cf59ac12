"""How the tests start a real multi-process job."""

from __future__ import annotations

import sys
from pathlib import Path

from fr_otel.demo.recorded_job import free_port


def torchrun(script: Path, ranks: int) -> list[str]:
    """torchrun starting ``ranks`` ranks of ``script`` on a free port."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(ranks),
        "--master-port",
        str(free_port()),
        str(script),
    ]
