"""The analysis session: one connection, relations with readable names, SQL traced."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from fr_otel.analysis import open_session
from fr_otel.analysis.session import RELATIONS
from fr_otel.report.grid import build_grid
from fr_otel.sim import FleetSpec, simulate, write_fleet


@pytest.fixture
def dumps(tmp_path: Path) -> Path:
    out = tmp_path / "dumps"
    write_fleet(simulate(FleetSpec(world=8, entries=120, fault="missing_rank", seed=0)), out)
    return out


def test_relations_have_readable_columns(dumps: Path) -> None:
    with open_session(dumps) as session:
        entries = session.relation("entries")
        assert {"rank", "record_id", "group_id", "collective_seq", "is_p2p"} <= set(entries.columns)
        groups = session.relation("groups")
        assert {"group_id", "name", "description", "members"} <= set(groups.columns)
        dumped = [r for (r,) in session.relation("dumped_ranks").fetchall()]
        assert sorted(dumped) == session.analysis.ranks
        for name in RELATIONS:
            session.relation(name).limit(1).fetchall()
        with pytest.raises(KeyError):
            session.view("e")


def test_the_analysis_is_made_once_and_the_grid_builds_on_the_session(dumps: Path) -> None:
    with open_session(dumps) as session:
        analysis = session.analysis
        assert session.analysis is analysis
        grid = build_grid(session, columns=20)
    assert grid.rows and grid.columns
    assert len(grid.findings) == len(analysis.findings)


def test_sql_passes_are_traced_at_debug_level(
    dumps: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.DEBUG, logger="fr_otel.analysis.sql"),
        open_session(dumps) as session,
    ):
        session.analysis  # noqa: B018
    traced = [r.getMessage() for r in caplog.records if r.name == "fr_otel.analysis.sql"]
    assert any(m.startswith("01_entries.sql: ") for m in traced)
    assert any(m.startswith("groups_from_") for m in traced)


def test_collectives_and_findings_are_relations_of_the_session(dumps: Path) -> None:
    with open_session(dumps) as session:
        analysis = session.analysis
        findings = session.relation("findings").order("idx").fetchall()
        columns = session.relation("findings").columns
        assert len(findings) == len(analysis.findings) > 0
        kinds = [row[columns.index("kind")] for row in findings]
        assert kinds == [f.kind for f in analysis.findings]
        root = [row[columns.index("idx")] for row in findings if row[columns.index("root_cause")]]
        assert root == [analysis.root_cause]
        # the missing rank never joined what its peers issued at the end
        missing = set(analysis.findings[analysis.root_cause or 0].culprit_ranks)
        not_joined = session.relation("collectives").filter("len(not_joined) > 0")
        absent = {r for (ranks,) in not_joined.select("not_joined").fetchall() for r in ranks}
        assert missing and missing <= absent, (missing, absent)
