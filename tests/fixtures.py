"""The committed dump fixtures (``tests/data``) as their ranks wrote them."""

from __future__ import annotations

import json
import os
from pathlib import Path


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
