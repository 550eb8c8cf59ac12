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
    help="Write OTLP JSON lines (the Collector's otlpjsonfile format) to this file.",
)
@click.option(
    "--jaeger-json",
    "jaeger_json",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write Jaeger JSON (loads in Jaeger UI's Upload without a backend) to this file.",
)
def export(
    archive: Path,
    job: str | None,
    incident: str | None,
    otlp_json: Path | None,
    jaeger_json: Path | None,
) -> int:
    """Export an incident's entries as spans: one trace per collective across ranks.

    Sending over OTLP gRPC/HTTP is not built yet (issue 4).
    """
    if otlp_json is None and jaeger_json is None:
        raise click.UsageError("say where to export: --otlp-json FILE and/or --jaeger-json FILE")
    import duckdb

    from fr_otel.analysis.source import pick_incident, register_archive
    from fr_otel.otel.encode import encode_requests
    from fr_otel.otel.jaegerjson import write_jaeger_json
    from fr_otel.otel.jsonfile import write_otlp_json

    chosen = pick_incident(archive, job, incident)
    with duckdb.connect() as connection:
        register_archive(connection, archive, only=chosen)
        table = connection.sql("SELECT * FROM src").to_arrow_table()
    requests = list(encode_requests(table))
    where = f"job={chosen.job} incident={chosen.incident}"
    if otlp_json is not None:
        spans = write_otlp_json(requests, otlp_json)
        click.echo(f"exported {spans} spans ({where}) to {otlp_json}")
    if jaeger_json is not None:
        spans = write_jaeger_json(requests, jaeger_json)
        click.echo(f"exported {spans} spans ({where}) to {jaeger_json}")
    return EXIT_OK
