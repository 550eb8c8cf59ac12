"""What the mirror of torch's Flight Recorder (``frsource.FrMirror``) counts: its reads and
their CPU cost, which space the next reads, and the entries it mirrored, missed or noted as
lost. The recorder reports them; the mirror's rows (``mirror_rows``) add to them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

COST_MEMORY = 5
"""Continuous mode's cap uses the median cost of this many recent reads: one read slowed by
a busy machine would otherwise hold its reads back under the cap while torch overwrote
entries. The spacing of other reads (``FrMirror._interval``) uses the larger of that
median and the last read's cost: reads cost more as torch's buffer fills, and a median
that lags behind them lets the first reads of a job come far more often than
``frsource.COST_FACTOR`` allows."""


@dataclass(kw_only=True)
class MirrorStats:
    reads: int = 0
    mirrored: int = 0
    """FR entries written to the torch ring (the hooks had not recorded them)."""
    missed: int = 0
    """FR entries torch overwrote before a read (its buffer is smaller than the gap)."""
    gaps: int = 0
    """Runs of a group's collectives noted as lost in the ring (``RingWriter.note_gap``)."""
    last_cost_s: float = 0.0
    """CPU time of the last read (the GIL is held for most of it)."""
    total_cost_s: float = 0.0
    recent_costs: deque[float] = field(default_factory=lambda: deque(maxlen=COST_MEMORY))
    """The last reads' CPU times: reads are spaced by their median."""
