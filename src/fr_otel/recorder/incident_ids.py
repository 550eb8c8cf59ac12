"""How the recorder names an incident: ``<UTC time>-<run>-<who>-<reason>``.

``who`` is the rank that declared it (``r3``) or ``launcher``; ``run`` is the last 8
characters of the run id (its random part, for ``config.new_run_id``'s and torchrun's
ids), so incidents of two launches of one job declared in the same second still differ.
Without a run id the part is left out.
"""

from __future__ import annotations

import time

RUN_PART_LENGTH = 8


def new_incident_id(who: str, reason: str, run_id: str | None) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    run = f"{run_id[-RUN_PART_LENGTH:].strip('-.')}-" if run_id else ""
    return f"{stamp}-{run}{who}-{reason}"
