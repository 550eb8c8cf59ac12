"""Documented SQL views over an archive, for ``fr-otel sql`` and plain DuckDB users.

- ``entries``: every row of the archive, in the canonical schema.
- ``collectives``: one row per collective instance (group, sequence number) with the
  ranks that joined it and the members that did not.
- ``arrival``: one row per rank per completed collective, with its lateness after the
  group's first member (``analysis.stragglers``).
- ``findings``: the analyzer's findings for every incident in the archive.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from fr_otel.analysis.engine import analyze_connection
from fr_otel.analysis.findings import findings_table
from fr_otel.analysis.source import Incident, register_archive
from fr_otel.analysis.sqlfiles import run_file
from fr_otel.analysis.stragglers import create_arrival
from fr_otel.archive.manifest import read_manifest

VIEW_DOCS = {
    "entries": "every Flight Recorder entry, one row each (columns: docs/schema.md)",
    "collectives": "one row per collective instance: group, seq, op, joined and not_joined ranks",
    "arrival": "one row per rank per completed collective: lateness_ns after the group's"
    " first member (clock-corrected issue time, or GPU start from NCCL durations), basis,"
    " clock_offset_ns, clock_uncertainty_ns",
    "findings": "the analyzer's findings for every incident (kind, culprit_ranks, waiting_ranks,"
    " summary, root_cause, consequence_of, ...)",
}


def register_views(connection: duckdb.DuckDBPyConnection, archive: Path, *, findings: bool) -> None:
    """Create ``entries`` and ``collectives``; ``findings`` too when asked (it runs the
    analyzer on every incident)."""
    register_archive(connection, archive)
    run_file(connection, "entries.sql", {})
    run_file(connection, "collectives.sql", {})
    create_arrival(connection, source="entries")
    if findings:
        _materialise_findings(connection, archive)


def _materialise_findings(connection: duckdb.DuckDBPyConnection, archive: Path) -> None:
    analyses = []
    incidents = connection.execute(
        "SELECT DISTINCT job, incident FROM entries ORDER BY ALL"
    ).fetchall()
    for job, incident in incidents:
        # its own connection to the same database, so its temporary tables stay private
        analyses.append(
            analyze_connection(
                connection.cursor(),
                Incident(job=job, incident=incident),
                read_manifest(archive, job, incident),
            )
        )
    table = findings_table(analyses)
    connection.register("findings_rows", table)
    run_file(connection, "findings.sql", {})
    connection.unregister("findings_rows")
