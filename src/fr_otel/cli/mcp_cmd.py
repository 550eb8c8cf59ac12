"""``fr-otel mcp``: an archive served to agents over the Model Context Protocol."""

from __future__ import annotations

from pathlib import Path

import click

from fr_otel.cli._errors import EXIT_OK


@click.command("mcp")
@click.argument("archive", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--max-rows",
    type=click.IntRange(min=1, max=10_000),
    default=200,
    show_default=True,
    help="sql_query: rows returned at most.",
)
@click.option(
    "--sql-timeout",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="sql_query: seconds a query may run.",
)
def mcp(archive: Path, max_rows: int, sql_timeout: float) -> int:
    """Serve ARCHIVE to an agent over MCP, on standard input and output.

    \b
    Tools: list_incidents; analyze_incident (the JSON of fr-otel analyze --format json);
    explain_finding (evidence, call sites and stacks, the ranks involved); sql_query
    (one read-only statement over the views of fr-otel sql).

    Nothing is written. The SQL runs locked down: no write, no other database, no file
    outside ARCHIVE, no extension, no network, no setting changed. Needs the mcp extra:
    pip install 'fr-otel[mcp]'. Register it with an MCP client as the command
    `fr-otel mcp ARCHIVE` (README, "Agents (MCP)").
    """
    from fr_otel.agents.readonly_sql import QueryLimits
    from fr_otel.agents.server import build_server

    server = build_server(archive, limits=QueryLimits(max_rows=max_rows, timeout_s=sql_timeout))
    server.run("stdio")
    return EXIT_OK
