"""Clock offsets between ranks, from events that happen at the same moment on every rank.

FR times are each host's wall clock, and hosts disagree by milliseconds (often more): a
rank whose clock runs 0.5 s behind would look 0.5 s early to every collective. A
collective completes at about the same moment on every member (the last arrival lets
them all finish), so the completion times of one collective, as each rank recorded them,
differ by the members' clock offsets plus noise. Only completion times an op's own return
gives count (the recorder's, on gloo): NCCL's ``time_discovered_completed_ns`` is when
its watchdog thread noticed, a poll whose phase differs from rank to rank by as much as
an offset would, so NCCL entries give no clock evidence (their GPU durations, where every
member has one, need none). Per group and rank, the offset is the median, over the
group's collectives, of the rank's completion time minus the members' mean completion
time of it; the residual uncertainty is the standard error of that median (from the
standard deviation of the per-collective differences). An offset within three times its
uncertainty is taken as zero. Offsets are relative to the group's consensus, which is all
that comparing members of one group needs.

Without completion times (torch's gloo dumps record none) no offset is estimated: the
offset is taken as zero and its uncertainty is unknown (null).

``CLOCK_SQL`` (``sql/clock.sql``) is a fragment of the arrival rows (``sql/arrival.sql``):
it reads the CTE ``joined`` (one completed collective entry per rank and slot, with
``gid`` and its slot's ``completed_center``; ``time_completed_ns`` null where it is no
evidence) and defines ``clock``.
"""

from __future__ import annotations

from fr_otel.analysis.sqlfiles import fragment

MEDIAN_SE = 1.2533
"""Standard error of a sample median over that of the mean, for normal noise."""

MIN_SAMPLES = 3
"""Collectives with completion times needed before an offset is estimated at all."""

SIGNIFICANT = 3
"""An estimated offset is applied only beyond this many times its uncertainty."""

CLOCK_SQL = fragment(
    "clock.sql", median_se=MEDIAN_SE, min_samples=MIN_SAMPLES, significant=SIGNIFICANT
)
"""The clock CTEs of the arrival rows (``sql/clock.sql``)."""
