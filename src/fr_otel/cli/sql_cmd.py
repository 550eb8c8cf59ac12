"""``fr-otel sql``: plain SQL over an archive, with documented views."""

from __future__ import annotations

import contextlib
import csv
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fr_otel import config
from fr_otel.cli._errors import EXIT_OK
from fr_otel.cli._options import engine_options, format_option, spark_engine
from fr_otel.errors import ArchiveError

if TYPE_CHECKING:
    import duckdb


def _describe(connection: duckdb.DuckDBPyConnection) -> str:
    from fr_otel.analysis.views import VIEW_DOCS
    from fr_otel.fleet.views import FLEET_VIEWS

    lines = ["Views (query them with: fr-otel sql ARCHIVE 'SELECT ...'):"]
    for view, doc in {**VIEW_DOCS, **FLEET_VIEWS}.items():
        lines.append(f"  {view}: {doc}")
        if view != "findings":
            columns = connection.execute(f"DESCRIBE {view}").fetchall()
            lines.append("    " + ", ".join(c[0] for c in columns))
    return "\n".join(lines)


@click.command("sql")
@click.argument("archive", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("query", required=False)
@format_option(["table", "csv", "json"])
@click.option("--max-rows", type=int, default=100, show_default=True, help="table format only")
@engine_options("spark: only the fleet views, on Spark SQL (pip install 'fr-otel[spark]').")
def sql(
    archive: Path, query: str | None, fmt: str, max_rows: int, engine: str, spark_master: str
) -> int:
    """Run SQL over an archive (DuckDB), with the views entries, collectives, findings,
    and the fleet's: fleet_incidents, fleet_hosts, fleet_bad_nodes, fleet_latency
    (docs/fleet.md; a query that names one analyses each incident not analysed yet).

    Without QUERY, reads it from standard input, or (on a terminal) lists the views and
    their columns. A rank file that cannot be read is named and left out of the views.
    The same Parquet files work with plain duckdb:
    read_parquet('ARCHIVE/**/*.parquet', hive_partitioning = true).
    With --engine spark, the fleet views only, from the same SQL files (each incident's
    analysis still runs here on DuckDB).
    """
    from fr_otel.analysis.source import is_archive, reading_damaged_files

    if not is_archive(archive):
        raise ArchiveError(f"{archive} is not an archive (no job=*/incident=*/*.parquet inside)")
    if query is None and not sys.stdin.isatty():
        query = sys.stdin.read()
    if engine == "spark":
        return _run_spark(archive, query, fmt, max_rows, spark_master)
    return reading_damaged_files(lambda: _run(archive, query, fmt, max_rows))


def _run(archive: Path, query: str | None, fmt: str, max_rows: int) -> int:
    import duckdb

    from fr_otel.analysis.source import connect, is_read_error, unusable_files
    from fr_otel.analysis.views import register_views

    with contextlib.ExitStack() as stack:
        connection = connect(stack)
        wants_findings = query is not None and re.search(r"\bfindings\b", query, re.I) is not None
        register_views(connection, archive, findings=wants_findings)
        wants_fleet = query is not None and re.search(r"\bfleet_\w+", query, re.I) is not None
        _register_fleet(connection, archive, refreshed=wants_fleet)
        for problem in unusable_files(connection):
            click.echo(f"fr-otel: {problem} (left out of the views)", err=True)
        if not query or not query.strip():
            click.echo(_describe(connection))
            return EXIT_OK
        try:
            relation = connection.sql(query)
        except duckdb.Error as exc:
            if is_read_error(exc) or isinstance(exc, duckdb.OutOfMemoryException):
                raise  # a damaged file: read again, checking every page; memory: see _errors
            raise click.ClickException(f"query failed: {exc}") from None
        if relation is None:
            return EXIT_OK
        _print(relation, fmt, max_rows)
    return EXIT_OK


def _print(relation: duckdb.DuckDBPyRelation, fmt: str, max_rows: int) -> None:
    if fmt == "table":
        click.echo(_table(relation, max_rows))
        return
    columns = relation.columns
    rows = relation.fetchall()
    if fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        for row in rows:
            sys.stdout.write(json.dumps(dict(zip(columns, row, strict=True)), default=str) + "\n")


def _run_spark(archive: Path, query: str | None, fmt: str, max_rows: int, master: str) -> int:
    """The fleet views on Spark; its rows printed as DuckDB's are (through Arrow)."""
    import duckdb

    from fr_otel.fleet.facts import refresh
    from fr_otel.fleet.views import FLEET_VIEWS

    spark = spark_engine()
    for job, incident, why in refresh(archive, workers=config.import_workers()).failed:
        click.echo(f"fr-otel: {job}/{incident}: left out of the fleet views ({why})", err=True)
    with spark.spark_session(master) as session:
        spark.register_fleet_views(session, archive)
        if not query or not query.strip():
            lines = ["Fleet views on Spark (query them with: fr-otel sql --engine spark ...):"]
            for view, doc in FLEET_VIEWS.items():
                lines += [f"  {view}: {doc}", "    " + ", ".join(spark.columns(session, view))]
            click.echo("\n".join(lines))
            return EXIT_OK
        spark.quiet_query_errors()
        try:
            table = spark.arrow(session, query)
        except spark.QueryError as exc:
            # the first line says what is wrong; the rest is Spark's plan
            raise click.ClickException(f"query failed: {str(exc).splitlines()[0]}") from None
    with contextlib.closing(duckdb.connect()) as connection:
        _print(connection.from_arrow(table), fmt, max_rows)
    return EXIT_OK


def _register_fleet(
    connection: duckdb.DuckDBPyConnection, archive: Path, *, refreshed: bool
) -> None:
    """The fleet views, over the incidents' facts made first when ``refreshed`` (a query
    that reads them), else over those the archive holds (listing the views)."""
    from fr_otel.fleet.facts import refresh
    from fr_otel.fleet.views import register_fleet_views

    if refreshed:
        for job, incident, why in refresh(archive, workers=config.import_workers()).failed:
            click.echo(f"fr-otel: {job}/{incident}: left out of the fleet views ({why})", err=True)
    register_fleet_views(connection, archive)


def _table(relation: duckdb.DuckDBPyRelation, max_rows: int) -> str:
    return str(relation.limit(max_rows)) if max_rows > 0 else str(relation)
