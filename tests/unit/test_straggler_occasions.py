"""How the straggler analysis counts a call site's separate occasions, on ``arrival`` rows
written here (the rule is arithmetic over arrival times; the real jobs that need it,
bursts of gloo all_reduces and torchtitan's FSDP2 steps, are in the integration tests).

Four ranks, one group, one call site; rank 2 arrives 5 ms after the others at every
collective, so every collective counts against it, and only the times between the
collectives decide how many occasions that is."""

from __future__ import annotations

import duckdb
import pytest

from fr_otel.analysis.stragglers import (
    TABLE_COLUMNS,
    SiteLateness,
    site_lateness,
    site_occasions,
)

MS = 1_000_000
LATE_NS = 5 * MS
OTHERS_NS = (0, 100_000, 50_000)


def _arrival(starts_ns: list[int]) -> duckdb.DuckDBPyConnection:
    """An ``arrival`` table of one collective per start time (in ``starts_ns``' order)."""
    connection = duckdb.connect()
    columns = [c.strip() for c in TABLE_COLUMNS.split(",")]
    rows = []
    for seq, start in enumerate(starts_ns, start=1):
        lateness = {0: OTHERS_NS[0], 1: OTHERS_NS[1], 2: LATE_NS, 3: OTHERS_NS[2]}
        typical = sum(OTHERS_NS) // len(OTHERS_NS)
        for rank, late in lateness.items():
            row = {
                "gid": 7,
                "rank": rank,
                "collective_seq_id": seq,
                "op": "all_reduce",
                "record_id": seq,
                "site": 11,
                "time_created_ns": start + late,
                "clock_offset_ns": 0,
                "clock_uncertainty_ns": None,
                "arrival_ns": start + late,
                "issue_lateness_ns": late,
                "gpu_lateness_ns": None,
                "lateness_ns": late,
                "latest_ns": LATE_NS,
                "typical_ns": typical,
                "basis": "issue",
            }
            rows.append(tuple(row[c] for c in columns))
    connection.execute(
        "CREATE TEMP TABLE arrival (gid UBIGINT, rank INTEGER, collective_seq_id BIGINT,"
        " op VARCHAR, record_id BIGINT, site UBIGINT, time_created_ns BIGINT,"
        " clock_offset_ns BIGINT, clock_uncertainty_ns BIGINT, arrival_ns BIGINT,"
        " issue_lateness_ns BIGINT, gpu_lateness_ns BIGINT, lateness_ns BIGINT,"
        " latest_ns DOUBLE, typical_ns DOUBLE, basis VARCHAR)"
    )
    connection.executemany(
        f"INSERT INTO arrival ({TABLE_COLUMNS}) VALUES ({', '.join('?' * len(columns))})", rows
    )
    return connection


def _rank_2(starts_ns: list[int]) -> SiteLateness:
    connection = _arrival(starts_ns)
    [site] = site_lateness(connection, {})
    assert site.rank == 2 and site.collectives == len(starts_ns)
    site_occasions(connection, [site])
    return site


def _bursts(count: int, size: int, *, within_ms: float, between_ms: float) -> list[int]:
    starts, now = [], 0.0
    for _ in range(count):
        for _ in range(size):
            starts.append(int(now * MS))
            now += within_ms
        now += between_ms - within_ms
    return starts


def test_a_burst_of_collectives_from_one_line_is_one_occasion() -> None:
    # FSDP's all-gathers of one step's ten layers, 5 ms apart, a step every 200 ms
    site = _rank_2(_bursts(30, 10, within_ms=5, between_ms=200))
    assert (site.occasions, site.late_occasions) == (30, 30)


def test_three_steps_of_bursts_are_three_occasions_however_many_collectives() -> None:
    site = _rank_2(_bursts(3, 10, within_ms=5, between_ms=200))
    assert (site.collectives, site.occasions) == (30, 3)


@pytest.mark.parametrize("pause_every", [20, 50])
def test_a_call_a_step_is_an_occasion_a_step_even_with_checkpoint_pauses(
    pause_every: int,
) -> None:
    # once a step, 100 ms apart, a 5 s checkpoint every `pause_every` steps: the pauses
    # are rarer than any burst's end, so they end no burst of single calls
    starts, now = [], 0
    for step in range(100):
        starts.append(now)
        now += 100 * MS + (5_000 * MS if step % pause_every == pause_every - 1 else 0)
    assert _rank_2(starts).occasions == 100


def test_evenly_spaced_collectives_with_jitter_are_each_an_occasion() -> None:
    starts = [step * 12 * MS + (step * 7919 % 10) * MS for step in range(60)]
    assert _rank_2(starts).occasions == 60
