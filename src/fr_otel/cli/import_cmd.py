"""``fr-otel import``: dump files -> Parquet archive."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fr_otel import config
from fr_otel.cli._errors import EXIT_BAD_INPUT, EXIT_OK


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
    help=f"Job name. Default: ${config.FR_OTEL_JOB}, ${config.OTEL_SERVICE_NAME}, or 'default'.",
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
def import_(
    dumps: tuple[str, ...],
    archive: Path | None,
    job: str | None,
    incident: str | None,
    strict: bool,
    workers: int | None,
) -> int:
    """Import Flight Recorder dumps into a hive-partitioned Parquet archive.

    DUMPS are dump files, directories holding them (searched recursively) or globs,
    pickle or JSON, any FR version, NCCL or gloo. Each bad file is named with its
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
    from fr_otel.recorder.ring_import import holds_rings

    rings = [Path(d) for d in dumps if holds_rings(Path(d))]
    if rings:
        if len(rings) != len(dumps):
            raise click.UsageError("import recorder rings (.ring) separately from dumps")
        return _import_rings(rings, archive, job, incident)
    spans_files = [Path(d) for d in dumps if _is_spans_file(Path(d))]
    if spans_files:
        if len(spans_files) != len(dumps):
            raise click.UsageError("import OTLP JSON lines files (.jsonl) separately from dumps")
        return _import_spans(spans_files, archive, job, incident)

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
        )
    finally:
        if bar is not None:
            bar.close()
    for problem in report.problems:
        click.echo(f"fr-otel: {problem.path}: {problem.problem}: {problem.detail}", err=True)
    for path, warning in report.warnings:
        click.echo(f"fr-otel: {path}: warning: {warning}", err=True)
    click.echo(report.summary())
    if report.swept:
        click.echo(
            f"fr-otel: removed {report.swept} file(s) an interrupted import had left", err=True
        )
    # nothing imported (no dumps, none with an entry): the input is unusable
    return EXIT_OK if report.ok and report.files_written else EXIT_BAD_INPUT


def _import_spans(
    files: list[Path], archive: Path | None, job: str | None, incident: str | None
) -> int:
    """OTLP JSON lines files (``fr-otel export --otlp-json``, the Collector's file
    exporter) back into an archive."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from fr_otel.archive.rows import write_rows
    from fr_otel.otel.otlp_import import read_otlp_json_table, unique_entries

    target = config.archive_dir(archive)
    tables = []
    for path in files:
        if not path.is_file():
            click.echo(f"fr-otel: {path}: missing: no such file", err=True)
            return EXIT_BAD_INPUT
        tables.append(read_otlp_json_table(path))
    table = pa.concat_tables(tables)
    for column, value in (("job", job), ("incident", incident)):
        if value is not None:
            name = config.validate_partition_value(column, value)
            table = table.set_column(
                table.schema.get_field_index(column), column, pa.repeat(pa.scalar(name), len(table))
            )
    table = unique_entries(table)
    written = write_rows(table, target)
    ranks = len(pc.unique(table["rank"]))
    click.echo(
        f"imported {ranks} ranks, {len(table)} entries from spans into {target}"
        f" ({len(written)} files)"
    )
    return EXIT_OK


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


def _is_spans_file(path: Path) -> bool:
    """OTLP JSON lines: ``*.jsonl``, or a ``*.json`` file that starts like the Collector's
    file exporter writes one (``data.json``, rotated ``data-2026-11-29T10-00-00.000.json``),
    not like an FR JSON dump."""
    if path.suffix == ".jsonl":
        return True
    if path.suffix != ".json" or not path.is_file():
        return False
    try:
        with path.open("rb") as handle:
            head = handle.read(64).lstrip()
    except OSError:
        return False
    return head.startswith((b'{"resourceSpans"', b'{"resource_spans"'))
