"""The fleet views over simulated fleets: planted bad hosts are ranked above every healthy
one and named bad nodes, a healthy fleet has none, and a host seen in one incident never is
one. The fleets are real archives (simulated dumps named ``<host>.pci3_rank_N``, imported
and analysed); the views run on DuckDB over their ``_fleet`` facts."""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from fr_otel.cli import main
from fr_otel.fleet import facts
from fr_otel.fleet.views import FLEET_VIEWS, Scope, register_fleet_views, view_sql

ROOT = Path(__file__).resolve().parents[2]


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
    return _simulated(folder, "--incidents", "48", "--bad-hosts", "2", "--seed", "7")


def test_planted_bad_hosts_rank_above_every_healthy_one_and_are_bad_nodes(
    planted: tuple[Path, list[str]],
) -> None:
    archive, bad = planted
    assert len(bad) == 2
    with _views(archive) as connection:
        ranking = connection.execute(
            "SELECT host, bad_node, z, incidents FROM fleet_bad_nodes ORDER BY z DESC"
        ).fetchall()
    hosts = [host for host, *_ in ranking]
    assert len(hosts) == 16
    assert set(hosts[: len(bad)]) == set(bad), ranking
    assert {host for host, flagged, *_ in ranking if flagged} == set(bad), ranking


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
    assert len(incidents) == 48
    for verdict, culprits, culprit_hosts, stragglers, ranks, host_count, day in incidents:
        assert ranks == 8 and host_count == 4 and re.fullmatch(r"2026-01-\d\d", day)
        if verdict == "straggler":
            assert stragglers and not culprits
        else:
            assert re.fullmatch(r"\d+", culprits) and re.fullmatch(r"node\d{3}", culprit_hosts)
    assert hosts == (48 * 4, sum(v != "straggler" for v, *_ in incidents), pytest.approx(12, abs=6))


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
            "SELECT host, z FROM fleet_bad_nodes WHERE bad_node OR z >= 3.090232"
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
    import pyarrow.parquet as pq

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
    assert out.startswith("48 incidents (2026-01-01 to 2026-01-14), 3 jobs, 16 hosts")
    assert "BAD NODES (blamed above the fleet's rate, one-sided 99.9%): " in out
    assert all(h in out.split("\n\n")[1] for h in bad)
    assert "Top findings:\n  " in out and "skipped_collective" in out

    assert main(["fleet", str(archive), "--format", "json", "--job", "job1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["incidents"] == 16 and report["jobs"] == 1
    assert [r["z"] for r in report["ranking"]] == sorted(
        (r["z"] for r in report["ranking"]), reverse=True
    )

    assert main(["fleet", str(archive), "--format", "json", "--since", "2026-01-08"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert 0 < report["incidents"] < 48 and report["first_ns"] >= report["since_ns"]

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
    assert again.made == [] and again.current == 48
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
