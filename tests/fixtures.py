"""The committed dump fixtures (``tests/data``) as their ranks wrote them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data"


def restore_dump_times(folder: Path) -> None:
    """Give a fixture's dump files (in ``folder``, a copy) the times their ranks wrote them
    (``scenario.json``'s ``dumped_ns``): a dump's file time is its dump time (gloo's dumps
    record none), and a checkout's "now" would make every last collective look pending for
    hours. Fixtures without recorded times are left as they are."""
    meta = json.loads((folder / "scenario.json").read_text())
    for rank, dumped in meta.get("dumped_ns", {}).items():
        for relative in meta["files"].get(rank, {}).values():
            path = folder / relative
            if path.exists():
                os.utime(path, ns=(dumped, dumped))


def two_real_gloo_runs(folder: Path) -> None:
    """Two real 4-rank gloo runs of the same program side by side in ``folder``, as a
    job's dump folder looks after a restart: the first lost rank 1's dump, the second
    rank 2's. An import splits them into two incidents and fills in the gloo groups'
    members, rewriting the files for both."""
    for path in (DATA / "gloo_healthy").iterdir():
        if path.name.startswith("comm_lib_trace_rank_") and "rank_1" not in path.name:
            shutil.copy(path, folder / path.name)
    (folder / "comm_traces").mkdir()
    for path in (DATA / "gloo_skipped_collective" / "comm_traces").iterdir():
        if not path.name.startswith("rank_2"):
            shutil.copy(path, folder / "comm_traces" / path.name)
