"""``fr-otel export``: an incident's collectives as OpenTelemetry spans."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING

import click

from fr_otel.cli._errors import EXIT_BAD_INPUT, EXIT_OK

if TYPE_CHECKING:
    from collections.abc import Iterable

    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from fr_otel.otel.transport import Payload, RequestExporter


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
    "--otlp",
    "otlp",
    is_flag=False,
    flag_value="",
    default=None,
    metavar="[ENDPOINT]",
    help="Send over OTLP to ENDPOINT, or to $OTEL_EXPORTER_OTLP_ENDPOINT when none is given"
    " (protocol, headers, compression, timeout, certificates: the standard OTEL_EXPORTER_OTLP_*"
    " variables). What cannot be delivered goes to the spool.",
)
@click.option(
    "--resend",
    is_flag=True,
    help="Deliver the spooled requests of an earlier export over OTLP, then delete them.",
)
@click.option(
    "--spool",
    "spool_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where undeliverable requests wait. Default: ARCHIVE/_spool.",
)
@click.option(
    "--deadline",
    type=click.FloatRange(min=0.1),
    default=60.0,
    show_default=True,
    help="Seconds the whole OTLP export may take, retries included.",
)
@click.option(
    "--findings",
    is_flag=True,
    help="Also run the analyzer and export each finding as a verdict span in the trace of"
    " its collective.",
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
    otlp: str | None,
    resend: bool,
    spool_dir: Path | None,
    deadline: float,
    findings: bool,
    jaeger_json: Path | None,
) -> int:
    """Export an incident's entries as spans: one trace per collective across ranks.

    Exit code 0 when everything was delivered or written, 2 when some requests could
    only be spooled (send them later with --otlp --resend) or were refused.
    """
    if otlp_json is None and jaeger_json is None and otlp is None:
        raise click.UsageError(
            "say where to export: --otlp [ENDPOINT], --otlp-json FILE and/or --jaeger-json FILE"
        )
    if resend and otlp is None:
        raise click.UsageError("--resend sends over OTLP: add --otlp [ENDPOINT]")
    spool_dir = spool_dir if spool_dir is not None else archive / "_spool"
    exporter = _exporter(otlp) if otlp is not None else None
    if resend:
        from fr_otel.otel.spool import resend as resend_spooled

        assert exporter is not None
        report = resend_spooled(spool_dir, exporter, deadline)
        exporter.shutdown()
        click.echo(
            f"resent {report.sent_spans} spans from {spool_dir};"
            f" {report.unsent_spans} still waiting"
        )
        return EXIT_OK if report.ok else EXIT_BAD_INPUT
    import duckdb

    from fr_otel.analysis.source import pick_incident, register_archive
    from fr_otel.otel.encode import encode_requests
    from fr_otel.otel.jaegerjson import write_jaeger_json
    from fr_otel.otel.jsonfile import write_otlp_json

    chosen = pick_incident(archive, job, incident)
    with duckdb.connect() as connection:
        register_archive(connection, archive, only=chosen)
        table = connection.sql("SELECT * FROM src").to_arrow_table()
    verdicts: list[ExportTraceServiceRequest] = []
    if findings:
        from fr_otel.analysis import analyze
        from fr_otel.otel.verdict import verdict_spans

        runs = set(table.column("run_id").to_pylist()) if "run_id" in table.column_names else set()
        verdict = verdict_spans(
            analyze(archive, job=chosen.job, incident=chosen.incident),
            run_id=runs.pop() if len(runs) == 1 else None,
        )
        verdicts = [verdict] if verdict.resource_spans else []
    # files need messages; the wire needs bytes, which the fast encoder writes directly
    from fr_otel import config

    resource = config.resource_attributes()
    requests = (
        list(encode_requests(table, resource=resource)) + verdicts
        if (otlp_json or jaeger_json)
        else []
    )
    where = f"job={chosen.job} incident={chosen.incident}"
    if otlp_json is not None:
        spans = write_otlp_json(requests, otlp_json)
        click.echo(f"exported {spans} spans ({where}) to {otlp_json}")
    if jaeger_json is not None:
        spans = write_jaeger_json(requests, jaeger_json)
        click.echo(f"exported {spans} spans ({where}) to {jaeger_json}")
    if exporter is None:
        return EXIT_OK
    from fr_otel.otel.spool import spool
    from fr_otel.otel.transport import send_all
    from fr_otel.otel.wire import encode_requests_fast

    payloads: Iterable[Payload] = itertools.chain(
        encode_requests_fast(table, resource=resource), verdicts
    )
    report = send_all(payloads, exporter, deadline_s=deadline)
    exporter.shutdown()
    message = f"sent {report.sent_spans} spans ({where}) over OTLP"
    if report.unsent:
        spool(report.unsent, spool_dir)
        message += (
            f"; {report.unsent_spans} spans spooled in {spool_dir}"
            f" ({'; '.join(report.reasons[-1:])}): send them later with --otlp --resend"
        )
    click.echo(message)
    return EXIT_OK if report.ok else EXIT_BAD_INPUT


def _exporter(endpoint: str) -> RequestExporter:
    from fr_otel import config
    from fr_otel.otel.transport import exporter_for

    settings = config.otlp_settings(endpoint or None)
    if settings is None:
        raise click.UsageError(
            "no OTLP endpoint: pass --otlp ENDPOINT or set OTEL_EXPORTER_OTLP_ENDPOINT"
        )
    return exporter_for(settings)
