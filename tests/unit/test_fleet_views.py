"""The fleet views over simulated fleets: planted bad hosts are ranked above every healthy
one and named bad nodes, a healthy fleet has none (of 12 hosts, or of 800 with few
incidents each, where a per-host test would name several), and a host seen in one
incident, or blamed in both of its two, never is one. The fleets are real archives
(simulated dumps named ``<host>.pci3_rank_N``, imported and analysed, or hand-written
facts); the views run on DuckDB over their ``_fleet`` facts. ``p_bound`` is checked
against the exact binomial tail over a ``fleet_hosts`` relation made for each case."""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fr_otel.cli import main
from fr_otel.fleet import facts
from fr_otel.fleet.views import (
    BAD_NODE_ALPHA,
    FLEET_VIEWS,
    Scope,
    register_fleet_views,
    view_sql,
)

ROOT = Path(__file__).resolve().parents[2]

_OLD_RULE = "incidents >= 2 AND blamed >= 2 AND z >= 3.090232"
"""The rule before the tail bound: a per-host score test at one-sided 99.9%."""


@contextlib.contextmanager
def _views(archive: Path, scope: Scope | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    connection = duckdb.connect()
    try:
        register_fleet_views(connection, archive, scope)
        yield connection
    finally:
        connection.close()


def _simulated(folder: Path, *args: str) -> tuple[Path, list[str]]:
    archive = folder / "fleet"
    assert main(["simulate", str(archive), "--truth", *args]) == 0
    truth = json.loads((folder / "fleet.truth.json").read_text())
    assert facts.refresh(archive).failed == []
    return archive, truth["bad_hosts"]


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    folder = tmp_path_factory.mktemp("planted")
    # 16 hosts, 4 to an incident: each host takes part in about 24 of the 96
    return _simulated(folder, "--incidents", "96", "--bad-hosts", "2", "--seed", "7")


def test_planted_bad_hosts_rank_above_every_healthy_one_and_are_bad_nodes(
    planted: tuple[Path, list[str]],
) -> None:
    archive, bad = planted
    assert len(bad) == 2
    with _views(archive) as connection:
        ranking = connection.execute(
            "SELECT host, bad_node, p_bound, confidence, z, incidents, blamed"
            " FROM fleet_bad_nodes ORDER BY p_bound, z DESC"
        ).fetchall()
    hosts = [host for host, *_ in ranking]
    assert len(hosts) == 16
    assert set(hosts[: len(bad)]) == set(bad), ranking
    assert {host for host, flagged, *_ in ranking if flagged} == set(bad), ranking
    for _, flagged, p_bound, confidence, *_ in ranking:
        assert flagged == (p_bound <= BAD_NODE_ALPHA / 16)
        assert confidence == pytest.approx(max(0.0, 1 - p_bound * 16))
    assert all(p_bound < 1e-9 for host, _, p_bound, *_ in ranking if host in bad), ranking


def test_the_incidents_view_names_the_culprits_hosts(planted: tuple[Path, list[str]]) -> None:
    archive, _ = planted
    with _views(archive) as connection:
        incidents = connection.execute(
            "SELECT verdict, culprit_ranks, culprit_hosts, straggler_ranks, ranks, hosts, day"
            " FROM fleet_incidents"
        ).fetchall()
        hosts = connection.execute(
            "SELECT sum(incidents), sum(culprit), sum(straggler) FROM fleet_hosts"
        ).fetchone()
    assert len(incidents) == 96
    for verdict, culprits, culprit_hosts, stragglers, ranks, host_count, day in incidents:
        assert ranks == 8 and host_count == 4 and re.fullmatch(r"2026-01-\d\d", day)
        if verdict == "straggler":
            assert stragglers and not culprits
        else:
            assert re.fullmatch(r"\d+", culprits) and re.fullmatch(r"node\d{3}", culprit_hosts)
    blamed = sum(v != "straggler" for v, *_ in incidents)
    assert hosts == (96 * 4, blamed, pytest.approx(24, abs=10))


def test_latency_by_op_size_group_kind_and_day(planted: tuple[Path, list[str]]) -> None:
    archive, _ = planted
    with _views(archive) as connection:
        rows = connection.execute(
            "SELECT day, op, group_kind, size_bucket, calls, mean_ms, max_ms FROM fleet_latency"
        ).fetchall()
    assert len({r[0] for r in rows}) >= 10  # the incidents span 14 days
    assert {"default_pg", "mesh_tp", "mesh_dp", "p2p"} <= {r[2] for r in rows}
    for _, _, _, bucket, calls, mean_ms, max_ms in rows:
        assert bucket == 0 or bucket & (bucket - 1) == 0  # a power of two
        assert calls > 0 and 0 <= mean_ms <= max_ms


def test_a_healthy_fleet_has_no_bad_node(tmp_path: Path) -> None:
    archive, bad = _simulated(tmp_path, "--incidents", "36", "--fleet-hosts", "12", "--seed", "3")
    assert bad == []
    with _views(archive) as connection:
        flagged = connection.execute(
            f"SELECT host, p_bound FROM fleet_bad_nodes WHERE bad_node OR {_OLD_RULE}"
        ).fetchall()
        assert connection.execute("SELECT count(*) FROM fleet_hosts").fetchone() == (12,)
    assert flagged == []


def _roles(archive: Path, job: str, incident: str, rows: list[dict[str, object]]) -> None:
    table = pa.Table.from_pylist(
        [
            {"job": job, "incident": incident, "verdict": "skipped_collective", **row}
            for row in rows
        ],
        schema=facts.roles_schema(),
    )
    path = facts.facts_path(archive, facts.ROLES, job, incident)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def _incident(archive: Path, number: int, blamed: str | None, others: list[str]) -> None:
    rows: list[dict[str, object]] = []
    for rank, host in enumerate([*(h for h in [blamed] if h), *others]):
        rows.append(
            {
                "rank": rank,
                "host": host,
                "culprit": host == blamed,
                "straggler": False,
                "waiting": host != blamed,
                "incident_time_ns": number,
            }
        )
    _roles(archive, "j", f"i{number:03d}", rows)


def test_a_host_in_one_incident_is_never_a_bad_node(tmp_path: Path) -> None:
    """Hand-written facts: 40 incidents of eight hosts that blame nobody but once, one
    host that took part once and was blamed, one blamed in each of its 6."""
    archive = tmp_path / "archive"
    healthy = [f"h{i}" for i in range(8)]
    for number in range(40):
        blamed = "h0" if number == 0 else None
        others = [h for h in healthy if h != blamed]
        if number == 1:
            blamed = "once"
        if 2 <= number < 8:
            blamed = "often"
        _incident(archive, number, blamed, others)
    with _views(archive) as connection:
        scored = {
            host: (incidents, blamed, bad, z)
            for host, incidents, blamed, bad, z in connection.execute(
                "SELECT host, incidents, blamed, bad_node, z FROM fleet_bad_nodes"
            ).fetchall()
        }
    assert scored["once"][:3] == (1, 1, False) and scored["once"][3] > 3.090232
    assert scored["often"][:3] == (6, 6, True)
    assert [h for h, (*_, bad, _) in scored.items() if bad] == ["often"]


def test_a_host_blamed_in_both_of_its_two_incidents_at_a_low_base_rate_is_not_a_bad_node(
    tmp_path: Path,
) -> None:
    """Hand-written facts: 50 incidents of 16 hosts, each blaming one of them in turn (a
    base rate of about 0.06), and "twice", in two of them and blamed in both. A healthy
    host does that with probability base_rate ** 2, about 0.004: the score test's z (5.5)
    called it bad; the tail bound, exact here, is far above 0.001 / 17."""
    archive = tmp_path / "archive"
    healthy = [f"h{i:02d}" for i in range(16)]
    for number in range(50):
        blamed = "twice" if number < 2 else healthy[number % 16]
        _incident(archive, number, blamed, [h for h in healthy if h != healthy[number % 16]])
    with _views(archive) as connection:
        [(incidents, blamed, base_rate, z, p_bound, confidence, bad, old)] = connection.execute(
            f"SELECT incidents, blamed, base_rate, z, p_bound, confidence, bad_node, {_OLD_RULE}"
            " FROM fleet_bad_nodes WHERE host = 'twice'"
        ).fetchall()
        [(hosts,)] = connection.execute("SELECT count(*) FROM fleet_bad_nodes").fetchall()
    assert (incidents, blamed, hosts) == (2, 2, 17)
    assert base_rate == pytest.approx(49 / 800) and z > 5 and old  # the old rule named it
    assert p_bound == pytest.approx(base_rate**2, rel=1e-12)
    assert confidence == pytest.approx(1 - 17 * base_rate**2, rel=1e-12)
    assert not bad


def test_a_large_healthy_fleet_has_no_bad_node(tmp_path: Path) -> None:
    """Hand-written facts of about 800 healthy hosts: 600 incidents, each of 12 of 200 busy
    hosts (about 36 incidents each) and 4 of 600 rarely used ones (about 4 each), blaming
    one of its 16 hosts at random (a base rate of 1/16). A test per host at 99.9% names
    several by chance (the old rule does: the same fleet is the check that this test can
    fail); the bound held to 0.001 / hosts names none."""
    rng = random.Random(5)
    busy = [f"busy{i:03d}" for i in range(200)]
    rare = [f"rare{i:03d}" for i in range(600)]
    archive = tmp_path / "archive"
    seen: set[str] = set()
    for number in range(600):
        hosts = rng.sample(busy, 12) + rng.sample(rare, 4)
        blamed = rng.choice(hosts)
        _incident(archive, number, blamed, [h for h in hosts if h != blamed])
        seen.update(hosts)
    with _views(archive) as connection:
        [(hosts, flagged, old, smallest)] = connection.execute(
            "SELECT count(*), count(CASE WHEN bad_node THEN 1 END),"
            f" count(CASE WHEN {_OLD_RULE} THEN 1 END), min(p_bound) FROM fleet_bad_nodes"
        ).fetchall()
    assert hosts == len(seen) > 780
    assert old >= 3, old
    assert flagged == 0 and smallest > BAD_NODE_ALPHA / hosts, smallest


def _fleet_of_two(
    connection: duckdb.DuckDBPyConnection, incidents: int, blamed: int, rest_blamed: int
) -> None:
    """``fleet_hosts`` of a host and the rest of a fleet (98 incidents, ``rest_blamed`` of
    them blamed): the host's base rate is ``(rest_blamed + 1) / 100``."""
    connection.execute(
        "CREATE OR REPLACE TEMP TABLE fleet_hosts AS SELECT * FROM (VALUES"
        " ('host', ?, ?, ?, 0, 'j/i: it'), ('rest', 98, ?, ?, 0, NULL))"
        " AS t(host, incidents, blamed, culprit, straggler, evidence)",
        [incidents, blamed, blamed, rest_blamed, rest_blamed],
    )


def test_the_bound_is_never_below_the_exact_tail_and_equal_to_it_where_all_were_blamed() -> None:
    """The view's ``p_bound`` over ``fleet_hosts`` relations made for each case (the only
    relation it reads), against the exact binomial tail P(X >= blamed)."""
    grid = [1, 2, 3, 4, 5, 8, 13, 20, 40, 97]
    with contextlib.closing(duckdb.connect()) as connection:
        _fleet_of_two(connection, 1, 1, 0)
        connection.execute(f"CREATE TEMP VIEW fleet_bad_nodes AS {view_sql('fleet_bad_nodes')}")
        for rest_blamed in (0, 5, 24, 59):
            for n in grid:
                for k in range(n + 1):
                    _fleet_of_two(connection, n, k, rest_blamed)
                    [(p, p_bound)] = connection.execute(
                        "SELECT base_rate, p_bound FROM fleet_bad_nodes WHERE host = 'host'"
                    ).fetchall()
                    assert p == pytest.approx((rest_blamed + 1) / 100, rel=1e-12)
                    tail = sum(math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))
                    case = (n, k, p, p_bound, tail)
                    if k / n <= p:
                        assert p_bound == 1.0, case
                    elif k == n:
                        assert p_bound == pytest.approx(tail, rel=1e-9), case
                    else:
                        assert tail < p_bound <= 1.0, case


def test_views_avoid_what_only_duckdb_accepts() -> None:
    """Each view is written once, for DuckDB and Spark SQL alike."""
    forbidden = re.compile(
        r"::|\blist_\w+|\bstruct_pack\b|\bQUALIFY\b|\bBY\s+ALL\b|\bEXCLUDE\b|->|\bunnest\b"
        r"|\bstrftime\b|\bepoch_\w+|\bto_timestamp\b|\bstring_agg\b|\barray_agg\b",
        re.I,
    )
    for name in FLEET_VIEWS:
        text = "\n".join(
            line for line in view_sql(name).splitlines() if not line.lstrip().startswith("--")
        )
        assert forbidden.findall(text) == [], name


def test_every_view_column_is_documented(planted: tuple[Path, list[str]]) -> None:
    doc = (ROOT / "docs" / "fleet.md").read_text()
    archive, _ = planted
    with _views(archive) as connection:
        for name in FLEET_VIEWS:
            assert f"`{name}`" in doc
            columns = [c[0] for c in connection.execute(f"DESCRIBE {name}").fetchall()]
            assert [c for c in columns if f"`{c}`" not in doc] == [], name


def test_fleet_command_prints_the_ranking_and_findings(
    planted: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    archive, bad = planted
    capsys.readouterr()
    assert main(["fleet", str(archive)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("96 incidents (2026-01-01 to 2026-01-14), 3 jobs, 16 hosts")
    assert "BAD NODES (blamed above the fleet's rate, 99.9% over every host): " in out
    assert all(h in out.split("\n\n")[1] for h in bad)
    assert "Top findings:\n  " in out and "skipped_collective" in out

    assert main(["fleet", str(archive), "--format", "json", "--job", "job1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["incidents"] == 32 and report["jobs"] == 1
    order = [(r["p_bound"], -r["z"]) for r in report["ranking"]]
    assert order == sorted(order)  # the strongest evidence first

    assert main(["fleet", str(archive), "--format", "json", "--since", "2026-01-08"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert 0 < report["incidents"] < 96 and report["first_ns"] >= report["since_ns"]

    assert main(["fleet", str(archive), "--since", "7d", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["incidents"] == 0  # all in January

    assert main(["fleet", str(archive), "--since", "last tuesday"]) == 2
    assert "neither an ISO date" in capsys.readouterr().err


def test_sql_reads_the_fleet_views(
    planted: tuple[Path, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    archive, bad = planted
    capsys.readouterr()
    query = "SELECT host FROM fleet_bad_nodes WHERE bad_node ORDER BY host"
    assert main(["sql", str(archive), query, "--format", "csv"]) == 0
    assert capsys.readouterr().out.split() == ["host", *sorted(bad)]


def test_facts_are_made_once_and_again_when_an_incident_changes(
    planted: tuple[Path, list[str]],
) -> None:
    archive, _ = planted
    again = facts.refresh(archive)
    assert again.made == [] and again.current == 96
    rank_file = next((archive / "job=job0").glob("incident=*/rank-000000.parquet"))
    stat = rank_file.stat()
    os.utime(rank_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    changed = facts.refresh(archive)
    assert changed.made == [("job0", rank_file.parent.name.removeprefix("incident="))]


def test_an_incident_that_cannot_be_read_is_left_out_and_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "fleet"
    assert main(["simulate", str(archive), "--incidents", "3", "--seed", "1"]) == 0
    damaged = sorted(archive.glob("job=*/incident=*"))[0]
    for rank_file in damaged.glob("*.parquet"):
        rank_file.write_bytes(b"PAR1 cut short")
    capsys.readouterr()
    assert main(["fleet", str(archive), "--format", "json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["incidents"] == 2
    assert f"{damaged.parent.name.removeprefix('job=')}/" in captured.err
    assert "left out" in captured.err


def test_facts_made_by_worker_processes_equal_those_made_in_turn(tmp_path: Path) -> None:
    """``refresh(workers=2)`` analyses incidents in a pool of processes: the same files,
    the same rows, and a damaged incident named in ``failed`` as in turn."""
    first = tmp_path / "in-turn"
    assert main(["simulate", str(first), "--incidents", "6", "--seed", "4"]) == 0
    damaged = sorted(first.glob("job=*/incident=*"))[2]
    for rank_file in damaged.glob("*.parquet"):
        rank_file.write_bytes(b"PAR1 cut short")
    second = tmp_path / "pooled"
    shutil.copytree(first, second)

    in_turn = facts.refresh(first, workers=1)
    made: list[tuple[str, str]] = []
    pooled = facts.refresh(second, workers=2, on_incident=lambda *key: made.append(key))

    assert len(in_turn.made) == 5 and pooled.made == in_turn.made == sorted(made)
    [(job, incident, why)] = pooled.failed
    assert (job, incident) == (
        damaged.parent.name.removeprefix("job="),
        damaged.name.removeprefix("incident="),
    )
    assert [f[:2] for f in in_turn.failed] == [(job, incident)] and why

    def facts_files(archive: Path) -> list[Path]:
        found = (archive / facts.FLEET_DIR).rglob(f"*{facts.SUFFIX}")
        return sorted(p.relative_to(archive) for p in found)

    files = facts_files(first)
    assert len(files) == 10 and facts_files(second) == files
    for name in files:
        assert pq.read_table(first / name).equals(pq.read_table(second / name)), name
    again = facts.refresh(second, workers=2)
    assert again.made == [] and again.current == 5
