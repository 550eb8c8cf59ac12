"""``fr-otel import``: dump files -> Parquet archive."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fr_otel import config
from fr_otel.cli._errors import EXIT_BAD_INPUT, EXIT_OK
from fr_otel.errors import FrOtelError


@click.command("import")
@click.argument("dumps", nargs=-1, required=True)
@click.option(
    "--archive",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help=f"Archive directory. Default: ${config.FR_OTEL_ARCHIVE} or ./{config.DEFAULT_ARCHIVE}.",
)
@click.option(
    "--job",
    default=None,
    help=(
        "Job name. Default: each dump's job=J folder (torch's dumps the recorder saved,"
        f" ARCHIVE/_fr_dumps/job=J/...), else ${config.FR_OTEL_JOB},"
        f" ${config.OTEL_SERVICE_NAME}, or 'default'."
    ),
)
@click.option(
    "--incident",
    default=None,
    help="Incident id. Default: derived from the dumps, so re-imports land in the same place.",
)
@click.option("--strict", is_flag=True, help="Write nothing unless every file imports cleanly.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes. Default: every core.",
)
@click.option(
    "--hosts",
    "hosts_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help='Where each rank ran, as a launcher can write it: JSON {"0": "node-a", ...} or'
    ' [{"rank": 0, "host": "node-a", "local_rank": 0}, ...], or CSV with a header'
    " rank,host[,local_rank][,device]. Wins over a host in the dump's file name"
    " (<host>.pci3_rank_N, nccl_trace_rank_<host>_N).",
)
def import_(
    dumps: tuple[str, ...],
    archive: Path | None,
    job: str | None,
    incident: str | None,
    strict: bool,
    workers: int | None,
    hosts_file: Path | None,
) -> int:
    """Import Flight Recorder dumps into a hive-partitioned Parquet archive.

    DUMPS are dump files, directories holding them (searched recursively) or globs,
    pickle or JSON, any FR version, NCCL or gloo; or OTLP JSON lines files of fr_otel's
    spans (*.jsonl: fr-otel export --otlp-json, the Collector's file exporter), named or
    in such directories, each span back to its job, incident and rank (a span the
    Collector delivered twice is imported once). Each bad file is named with its
    problem and the others are still imported; the exit code is then 2, as it is when
    nothing could be imported (a folder without dumps). Dumps of different runs of a job
    (told apart by their times, FR and library versions and world size) become separate
    incidents, INCIDENT-run1, -run2... oldest first. Interrupted (Ctrl-C, SIGTERM), it
    stops its workers and removes its temporary files; the next import removes those a
    killed import left.

    \b
    Query the archive with DuckDB:
      SELECT * FROM read_parquet('ARCHIVE/**/*.parquet', hive_partitioning = true)
    """
    # imported here so that other commands start without them
    from tqdm import tqdm

    from fr_otel.archive import import_dumps
    from fr_otel.archive.hosts import read_host_map
    from fr_otel.recorder.ring_import import holds_rings

    hosts = read_host_map(hosts_file) if hosts_file is not None else None
    rings = [Path(d) for d in dumps if holds_rings(Path(d))]
    if rings:
        if len(rings) != len(dumps):
            raise click.UsageError("import recorder rings (.ring) separately from dumps")
        return _import_rings(rings, archive, job, incident)
    bar: tqdm | None = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:
            bar = tqdm(total=total, unit="file", desc="importing", leave=False, file=sys.stderr)
        bar.update(done - bar.n)

    on_progress = progress if sys.stderr.isatty() else None
    try:
        report = import_dumps(
            list(dumps),
            archive=archive,
            job=job,
            incident=incident,
            strict=strict,
            workers=workers,
            on_progress=on_progress,
            hosts=hosts,
        )
    finally:
        if bar is not None:
            bar.close()
    for problem in report.problems:
        click.echo(f"fr-otel: {problem.path}: {problem.problem}: {problem.detail}", err=True)
    for path, warning in report.warnings:
        click.echo(f"fr-otel: {path}: warning: {warning}", err=True)
    click.echo(report.summary())
    if report.files_written:
        _prepare(report.archive, report.job_incidents)
    if report.swept:
        click.echo(
            f"fr-otel: removed {report.swept} file(s) an interrupted import had left", err=True
        )
    # nothing imported (no dumps, none with an entry): the input is unusable
    return EXIT_OK if report.ok and report.files_written else EXIT_BAD_INPUT


def _prepare(archive: Path, incidents: list[tuple[str, str]]) -> None:
    """The incidents' (job, incident) first analysis pass, kept in the archive
    (``analysis.prepared``). The import has succeeded whatever happens here: an analysis
    makes what is missing."""
    import duckdb

    from fr_otel.analysis.session import prepare_incident

    for job, incident in incidents:
        try:
            prepare_incident(archive, job=job, incident=incident)
        except (FrOtelError, duckdb.Error, OSError) as exc:
            click.echo(
                f"fr-otel: warning: {incident}: not prepared for analysis ({exc});"
                " fr-otel analyze will read it all",
                err=True,
            )


def _import_rings(
    paths: list[Path], archive: Path | None, job: str | None, incident: str | None
) -> int:
    """The recorder's ring files (``ARCHIVE/_rings``), for ranks nobody flushed: a job
    killed before any rank could declare an incident, run without ``fr-otel run``."""
    from fr_otel.recorder.ring_import import import_rings

    target = config.archive_dir(archive)
    imported = import_rings(paths, target, job, incident)
    for problem in imported.problems:
        click.echo(f"fr-otel: {problem}", err=True)
    if not imported.incidents:
        return EXIT_BAD_INPUT
    for name, (rings, entries) in imported.incidents.items():
        click.echo(f"imported {rings} rings, {entries} entries into {target} (incident {name})")
    return EXIT_BAD_INPUT if imported.problems else EXIT_OK
