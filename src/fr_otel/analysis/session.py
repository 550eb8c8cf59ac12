"""One incident under analysis: the DuckDB connection, and the relations the analysis made.

A session owns the connection its source opened (``open_source``) and the tables the
analysis builds in it (``sql/``). It analyses the incident once (``analysis``); whoever
builds on the analysis (the report's grid, its lateness strip) reads those tables as
named relations with readable column names (``view``, ``relation``), never by the
analyzer's own table names, which are its private business.

    with open_session("archive/") as session:
        session.analysis.findings
        session.relation("entries").filter("rank = 3")
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fr_otel.analysis.source import Incident, Source, open_source
from fr_otel.analysis.sqlfiles import run_file

if TYPE_CHECKING:
    import duckdb

    from fr_otel.analysis.findings import Analysis

# The analysis's own modules (and DuckDB) load on first use: opening a session on dumps
# loads them while the import's workers convert the dumps (source.open_source).

RELATIONS: dict[str, str] = {
    "entries": (
        "SELECT rank, record_id, gid AS group_id, p2p AS is_p2p, seq AS collective_seq,"
        " op, done, started, time_created_ns FROM e"
    ),
    "groups": (
        "SELECT gid AS group_id, pg_name AS name, pg_desc AS description, members,"
        " inferred AS members_inferred FROM groups"
    ),
    "dumped_ranks": "SELECT rank FROM dumped",
    "slots": (
        "SELECT gid AS group_id, seq AS collective_seq, rank, sig AS signature,"
        " first_record AS record_id, created_ns, done FROM slots"
    ),
    "arrival": "SELECT * FROM arrival",
    "collectives": "SELECT * FROM collectives",
    "findings": "SELECT * FROM incident_findings_rows",
}
"""What the analysis hands out, by name: ``entries`` (one row per entry the analysis
matched: its group, collective sequence number (null for point-to-point), finished or
started), ``groups`` (every process group, with its members), ``dumped_ranks`` (ranks
whose dump held entries), ``slots`` (one row per rank per collective of a group), and
``arrival`` (lateness per rank per collective, ``stragglers``), ``collectives`` (one row
per collective instance: the ranks that joined it and the members that did not, as
``fr-otel sql`` shows them) and ``findings`` (one row per finding,
``findings.findings_schema()``)."""


@dataclass(kw_only=True)
class Session:
    """An open incident, analysed once; see the module's docstring."""

    source: Source
    _analysis: Analysis | None = None
    _views: set[str] = field(default_factory=set)

    @property
    def connection(self) -> duckdb.DuckDBPyConnection:
        return self.source.connection

    @property
    def incident(self) -> Incident:
        return self.source.incident

    @property
    def analysis(self) -> Analysis:
        """The incident's analysis (made on first use)."""
        if self._analysis is None:
            from fr_otel.analysis import engine

            source = self.source
            analysis = engine.analyze_connection(
                source.connection,
                source.incident,
                source.manifest,
                entries_folder=source.entries_folder,
            )
            analysis.input_problems = [
                {"path": p.path, "problem": p.problem, "detail": p.detail}
                for p in source.import_problems
            ]
            self._analysis = analysis
        return self._analysis

    def view(self, name: str) -> str:
        """The name to use in SQL for relation ``name`` (one of ``RELATIONS``), after the
        analysis."""
        if name not in RELATIONS:
            raise KeyError(f"no relation {name!r}; there are {', '.join(RELATIONS)}")
        self.analysis  # noqa: B018 - the relations are what it builds
        view = f"incident_{name}"
        if view not in self._views:
            self._make(name)
            self.connection.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {RELATIONS[name]}")
            self._views.add(view)
        return view

    def _make(self, name: str) -> None:
        """What relation ``name`` reads that the analysis itself does not build."""
        if name == "collectives":
            run_file(self.connection, "collectives.sql", {})
        elif name == "findings":
            from fr_otel.analysis.findings import findings_table

            self.connection.register("incident_findings_rows", findings_table([self.analysis]))

    def relation(self, name: str) -> duckdb.DuckDBPyRelation:
        """Relation ``name`` (one of ``RELATIONS``), to query further."""
        return self.connection.table(self.view(name))


@contextlib.contextmanager
def open_session(
    path: str | Path,
    *,
    job: str | None = None,
    incident: str | None = None,
    memory_limit: str | None = None,
) -> Iterator[Session]:
    """A session on ``path``: an archive, or dumps imported on the fly (``open_source``)."""
    with open_source(path, job=job, incident=incident, memory_limit=memory_limit) as source:
        yield Session(source=source)


def analyze(
    path: str | Path,
    *,
    job: str | None = None,
    incident: str | None = None,
    memory_limit: str | None = None,
) -> Analysis:
    """Analyse an archive, or dumps imported on the fly (see ``open_source``)."""
    with open_session(path, job=job, incident=incident, memory_limit=memory_limit) as session:
        return session.analysis


def prepare_incident(
    archive: str | Path, *, job: str, incident: str, memory_limit: str | None = None
) -> None:
    """Keep the first pass's result beside the incident's rank files (``prepared``),
    unless it is there and current, so that its first analysis is as fast as the next."""
    from fr_otel.analysis import engine

    with open_source(archive, job=job, incident=incident, memory_limit=memory_limit) as source:
        if source.entries_folder is not None:
            engine.prepare_entries(
                source.connection, source.incident, source.manifest, source.entries_folder
            )
