"""``fr-otel export``: an incident's collectives as OpenTelemetry spans."""

from __future__ import annotations

from pathlib import Path

import click

from fr_otel.cli._errors import EXIT_OK


@click.command("export")
@click.argument("archive", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--job", default=None, help="Job to export (default: the archive's latest).")
@click.option("--incident", default=None, help="Incident to export (default: the latest).")
@click.option(
    "--otlp-json",
    "otlp_json",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Write OTLP JSON lines (the Collector's otlpjsonfile format) to this file.",
)
def export(archive: Path, job: str | None, incident: str | None, otlp_json: Path) -> int:
    """Export an incident's entries as spans: one trace per collective across ranks.

    Sending over OTLP gRPC/HTTP and Jaeger JSON files are not built yet (issue 4).
    """
    import duckdb

    from fr_otel.analysis.source import pick_incident, register_archive
    from fr_otel.otel.encode import encode_requests
    from fr_otel.otel.jsonfile import write_otlp_json

    chosen = pick_incident(archive, job, incident)
    with duckdb.connect() as connection:
        register_archive(connection, archive, only=chosen)
        table = connection.sql("SELECT * FROM src").to_arrow_table()
    spans = write_otlp_json(encode_requests(table), otlp_json)
    click.echo(
        f"exported {spans} spans (job={chosen.job} incident={chosen.incident}) to {otlp_json}"
    )
    return EXIT_OK
