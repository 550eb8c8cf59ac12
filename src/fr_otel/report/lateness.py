"""The report's lateness strip: for a few ranks, how late each arrived at its collectives
over the incident's window, from the analysis session's ``arrival`` relation."""

from __future__ import annotations

from dataclasses import dataclass, field

from fr_otel.analysis import Analysis, Session

STRIP_RANKS = 16
"""Ranks the strip shows: the stragglers, then the latest of the others, then the
earliest one (a reference)."""

STRIP_BUCKETS = 60
"""Slices of each rank's collectives, oldest first: one bar each."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RankLateness:
    rank: int
    median_ms: float
    p90_ms: float
    straggler: bool
    buckets_ms: list[float] = field(default_factory=list)
    """Mean lateness of each slice of the rank's collectives, oldest first."""


@dataclass(frozen=True, kw_only=True, slots=True)
class LatenessStrip:
    ranks: list[RankLateness]
    ranks_total: int


def wants_strip(analysis: Analysis) -> bool:
    """A strip for slow jobs and snapshots of running ones, where lateness is the story."""
    return analysis.snapshot is not None or any(f.kind == "straggler" for f in analysis.findings)


def lateness_strip(
    session: Session, *, limit: int = STRIP_RANKS, buckets: int = STRIP_BUCKETS
) -> LatenessStrip | None:
    """The strip's rows from the session's ``arrival`` relation."""
    analysis, connection, arrival = session.analysis, session.connection, session.view("arrival")
    stragglers = {r for f in analysis.findings if f.kind == "straggler" for r in f.culprit_ranks}
    per_rank = connection.execute(
        f"SELECT rank, median(lateness_ns), quantile_cont(lateness_ns, 0.9) FROM {arrival}"
        " GROUP BY rank ORDER BY 2 DESC, rank"
    ).fetchall()
    if not per_rank:
        return None
    chosen = [row for row in per_rank if row[0] in stragglers]
    others = [row for row in per_rank if row[0] not in stragglers]
    room = max(limit - len(chosen), 0)
    if room and others:
        # the latest of the others, and the earliest as the reference
        shown = others[: room - 1]
        chosen += [*shown, others[-1]] if others[-1] not in shown else shown
    ranks = [int(rank) for rank, _, _ in chosen]
    listed = ", ".join(map(str, ranks))
    series: dict[int, list[float]] = {rank: [] for rank in ranks}
    for rank, _bucket, value in connection.execute(
        "SELECT rank, bucket, avg(lateness_ns) FROM ("
        f"  SELECT rank, lateness_ns, ntile({int(buckets)}) OVER"
        "     (PARTITION BY rank ORDER BY arrival_ns) AS bucket"
        f"  FROM {arrival} WHERE rank IN ({listed})"
        ") GROUP BY rank, bucket ORDER BY rank, bucket"
    ).fetchall():
        series[rank].append(round(value / 1e6, 3))
    rows = [
        RankLateness(
            rank=int(rank),
            median_ms=round(median / 1e6, 3),
            p90_ms=round(p90 / 1e6, 3),
            straggler=rank in stragglers,
            buckets_ms=series[int(rank)],
        )
        for rank, median, p90 in chosen
    ]
    return LatenessStrip(ranks=rows, ranks_total=len(per_rank))
