"""One dump per rank: of a rank's several dumps one is imported; the same buffer in another
encoding is a twin skipped, another buffer a duplicate named as a problem."""

from __future__ import annotations

from fr_otel.archive.import_report import ImportReport
from fr_otel.archive.stage_dump import Outcome
from fr_otel.errors import DumpError

RankKey = tuple[str, str, int]
"""(job, incident, rank): one rank file."""


def pick_per_rank(
    outcomes: list[Outcome], report: ImportReport
) -> tuple[dict[RankKey, Outcome], list[Outcome]]:
    """One outcome per (job, incident, rank); the rest are twins or reported duplicates."""
    by_key: dict[RankKey, list[Outcome]] = {}
    for outcome in outcomes:
        if outcome.error is None:
            rank = outcome.task.dump.rank
            assert rank is not None  # unnamed dumps fail in load_dump_file
            by_key.setdefault((outcome.task.job, outcome.task.incident, rank), []).append(outcome)
    kept: dict[RankKey, Outcome] = {}
    dropped: list[Outcome] = []
    for key, candidates in sorted(by_key.items()):
        # Pickle first (it has stack frames), then the newest buffer, then path order.
        candidates.sort(
            key=lambda o: (o.source_format != "pickle", -o.span[2], str(o.task.dump.path))
        )
        best = candidates[0]
        kept[key] = best
        for other in candidates[1:]:
            dropped.append(other)
            if other.span == best.span:
                report.twins_skipped.append(other.task.dump.path)
            else:
                report.problems.append(
                    DumpError(
                        other.task.dump.path,
                        "duplicate",
                        f"rank {key[2]} also has the dump {best.task.dump.path}, which holds a"
                        " newer buffer; this one was not imported",
                    )
                )
    return kept, dropped
