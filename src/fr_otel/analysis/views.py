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
from fr_otel.analysis.source import Incident, register_archive
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

COLLECTIVES_SQL = """
CREATE OR REPLACE VIEW collectives AS
WITH per_instance AS (
    SELECT
        job, incident, pg_name, any_value(pg_desc) AS pg_desc,
        list_sort(any_value(pg_ranks)) AS pg_ranks, collective_seq_id,
        mode(op) AS op,
        list(DISTINCT rank ORDER BY rank) AS joined,
        count(DISTINCT op) > 1 AS ops_differ,
        bool_and(entry_done(state, backend, retired)) AS completed,
        min(time_created_ns) AS first_created_ns
    FROM entries
    WHERE NOT entry_p2p(is_p2p, op) AND op <> 'coalesced'
    GROUP BY job, incident, pg_name, list_sort(pg_ranks), collective_seq_id
)
SELECT *, list_filter(pg_ranks, lambda r: NOT list_contains(joined, r)) AS not_joined
FROM per_instance
"""


def register_views(connection: duckdb.DuckDBPyConnection, archive: Path, *, findings: bool) -> None:
    """Create ``entries`` and ``collectives``; ``findings`` too when asked (it runs the
    analyzer on every incident)."""
    register_archive(connection, archive)
    connection.execute("CREATE OR REPLACE VIEW entries AS SELECT * FROM src")
    connection.execute(COLLECTIVES_SQL)
    create_arrival(connection, source="entries")
    if findings:
        _materialise_findings(connection, archive)


def _materialise_findings(connection: duckdb.DuckDBPyConnection, archive: Path) -> None:
    rows = []
    incidents = connection.execute(
        "SELECT DISTINCT job, incident FROM entries ORDER BY ALL"
    ).fetchall()
    for job, incident in incidents:
        # its own connection to the same database, so its temporary tables stay private
        analysis = analyze_connection(
            connection.cursor(),
            Incident(job=job, incident=incident),
            read_manifest(archive, job, incident),
        )
        for index, finding in enumerate(analysis.findings):
            rows.append(
                (
                    job,
                    incident,
                    index,
                    finding.kind,
                    finding.group.name,
                    finding.group.desc,
                    list(finding.group.ranks or ()),
                    finding.collective_seq_id,
                    finding.op,
                    finding.culprit_ranks,
                    finding.summary,
                    index == analysis.root_cause,
                    finding.consequence_of,
                    sorted(finding.waiting_ranks),
                )
            )
    connection.execute(
        "CREATE OR REPLACE TEMP TABLE findings (job VARCHAR, incident VARCHAR, idx INTEGER,"
        " kind VARCHAR, pg_name VARCHAR, pg_desc VARCHAR, pg_ranks BIGINT[],"
        " collective_seq_id BIGINT, op VARCHAR, culprit_ranks BIGINT[], summary VARCHAR,"
        " root_cause BOOLEAN, consequence_of INTEGER, waiting_ranks BIGINT[])"
    )
    if rows:
        connection.executemany(
            "INSERT INTO findings VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows
        )
