"""The fleet views, each defined once (``analysis/sql/fleet_*.sql``), over an archive's
fleet facts (``fleet.facts``).

Each file is one ``SELECT`` in SQL that DuckDB and Spark SQL both run (CASE, CAST,
standard aggregates and window functions; no list functions, ``::`` casts, QUALIFY or
macros), with ``{name}`` places that ``view_sql`` fills from ``VIEW_CONSTANTS``, over two
relations an engine provides: ``fleet_roles`` (one row per rank per
incident, ``facts.roles_schema``) and ``fleet_latency_rows`` (``facts.latency_schema``).
A view may read the views before it in ``FLEET_VIEWS``. Here DuckDB makes them temporary
views; an engine that reads the same Parquet does the same with the same text.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from fr_otel.analysis.sqlfiles import sql_string
from fr_otel.errors import ArchiveError
from fr_otel.fleet import facts, object_store

if TYPE_CHECKING:
    import duckdb

FLEET_VIEWS: dict[str, str] = {
    "fleet_incidents": "one row per incident: verdict (root cause kind), summary, culprit"
    " ranks and hosts, straggler ranks, world size, time and day",
    "fleet_hosts": "one row per host: incidents it took part in, and how many of them named"
    " it culprit, straggler or waiting, with the latest evidence",
    "fleet_bad_nodes": "every host tested against the rest of the fleet: rate of incidents"
    " that blamed it, base rate, excess, z, p_bound, confidence, bad_node (docs/fleet.md)",
    "fleet_latency": "completed collectives by day, op, group kind and size bucket: calls,"
    " mean_ms, max_ms",
}
"""The fleet views, in the order they are made, with what ``fr-otel sql`` says of them."""

BAD_NODE_ALPHA = 0.001
"""The family-wise false-alarm rate of ``fleet_bad_nodes``' ``bad_node``: the most a fleet
with no bad host may be named one, whatever its size (each host's bound is held to
``BAD_NODE_ALPHA / hosts``). Lower is stricter; docs/fleet.md says what it trades."""

VIEW_CONSTANTS: dict[str, float] = {"bad_node_alpha": BAD_NODE_ALPHA}
"""What ``view_sql`` writes in place of each ``{name}`` of the view files: a constant
rather than a bound parameter, since a view takes none on either engine."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Scope:
    """Which incidents the views cover: of ``job`` only, since ``since_ns``."""

    job: str | None = None
    since_ns: int | None = None


def view_sql(name: str) -> str:
    """The ``SELECT`` that defines fleet view ``name``, its constants written in."""
    text = resources.files("fr_otel.analysis").joinpath("sql", f"{name}.sql").read_text()
    return text.format(**VIEW_CONSTANTS)


def source_sql(relation: str, table: str, scope: Scope) -> str:
    """The SELECT of ``table``'s facts (``facts.ROLES``, ``facts.LATENCY``) in ``scope``
    from ``relation``, which an engine makes of the files: the same text on every engine.
    The latency rows' ``since`` reads ``fleet_roles``, made first."""
    columns = facts.ROLES_COLUMNS if table == facts.ROLES else facts.LATENCY_COLUMNS
    conditions = ["TRUE"]
    if scope.job is not None:
        conditions.append(f"job = {sql_string(scope.job)}")
    if scope.since_ns is not None:
        if table == facts.ROLES:
            conditions.append(f"incident_time_ns >= {int(scope.since_ns)}")
        else:
            roles = f"fleet_roles WHERE incident_time_ns >= {int(scope.since_ns)}"
            conditions.append(f"(job, incident) IN (SELECT job, incident FROM {roles})")
    names = ", ".join(name for name, _ in columns)
    return f"SELECT {names} FROM {relation} WHERE {' AND '.join(conditions)}"


def _source(
    connection: duckdb.DuckDBPyConnection, archive: Path | str, table: str, scope: Scope
) -> str:
    """A SELECT of the facts of ``table`` in ``scope`` (an empty relation of its columns
    where no incident has any)."""
    columns = facts.ROLES_COLUMNS if table == facts.ROLES else facts.LATENCY_COLUMNS
    import duckdb

    glob = facts.facts_glob(archive, table)
    try:
        [(have,)] = connection.execute("SELECT count(*) FROM glob(?)", [glob]).fetchall()
    except duckdb.Error as exc:
        if isinstance(archive, Path):
            raise
        raise ArchiveError(f"{archive}: cannot list it: {object_store.reason(exc)}") from None
    if have:
        relation = f"read_parquet({sql_string(glob)}, union_by_name = true)"
    else:
        nulls = ", ".join(f"CAST(NULL AS {kind}) AS {name}" for name, kind in columns)
        relation = f"(SELECT {nulls} WHERE FALSE)"
    return source_sql(relation, table, scope)


def register_fleet_views(
    connection: duckdb.DuckDBPyConnection, archive: Path | str, scope: Scope | None = None
) -> None:
    """Create ``fleet_roles``, ``fleet_latency_rows`` and every ``FLEET_VIEWS`` view in
    ``connection`` over the facts the archive holds now (``facts.refresh`` makes them):
    a folder, or a URL (``s3://bucket/archive``) whose file system ``connection`` is then
    given (``object_store.register``)."""
    scope = scope or Scope()
    if isinstance(archive, str):
        object_store.register(connection, archive)
    roles = _source(connection, archive, facts.ROLES, scope)
    connection.execute(f"CREATE OR REPLACE TEMP VIEW fleet_roles AS {roles}")
    latency = _source(connection, archive, facts.LATENCY, scope)
    connection.execute(f"CREATE OR REPLACE TEMP VIEW fleet_latency_rows AS {latency}")
    for name in FLEET_VIEWS:
        connection.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {view_sql(name)}")
