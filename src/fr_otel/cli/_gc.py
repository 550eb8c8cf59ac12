"""The cyclic garbage collector's pace in a command that runs once and then ends.

Python collects its youngest objects every 700 net allocations. ``fr-otel analyze``
would then run a hundred or more collections, some of them full, that free next to
nothing: what it allocates is modules' objects that live as long as the process, and
trees of rows and outcomes that reference counting frees. A pace of tens of thousands
of allocations leaves a handful. Cycles are still collected, only in larger batches;
the recorder, inside a training process, never changes the pace.
"""

from __future__ import annotations

import gc

from fr_otel.cli._errors import state

YOUNG_ALLOCATIONS = 50_000
"""Net allocations between two collections of the youngest generation (Python: 700)."""


def collect_rarely() -> None:
    """Collect cycles every ``YOUNG_ALLOCATIONS`` allocations, where the process ends with
    the command (the console script); an in-process caller's ``main`` keeps its pace."""
    if state.process_ends:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(YOUNG_ALLOCATIONS, older, oldest)
