"""OTLP JSON lines files (``fr-otel export --otlp-json``, the Collector's file exporter)
imported into an archive: each span keeps its job, incident and rank, and a span delivered
twice (a Collector delivers at least once) is imported once."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from fr_otel import config
from fr_otel.archive import footer_members
from fr_otel.archive.import_report import ImportReport, IncidentImported
from fr_otel.archive.spans_file import read_spans_file


def import_spans(
    files: list[Path],
    *,
    archive: Path,
    job: str | None,
    incident: str | None,
    strict: bool,
    report: ImportReport,
) -> ImportReport:
    """OTLP JSON lines files into ``archive``. Spans keep their own job and incident
    unless ``job`` / ``incident`` name one."""
    import pyarrow.compute as pc

    from fr_otel.archive.manifest import continuous_incidents, mark_snapshot, read_manifest
    from fr_otel.archive.rows import write_rows
    from fr_otel.otel.otlp_import import UNKNOWN, unique_entries

    report.spans_files = len(files)
    tables: list[pa.Table] = []
    for path in files:
        read = read_spans_file(path)
        if read.problem is not None:
            report.problems.append(read.problem)
        if read.table is not None and read.table.num_rows:
            tables.append(read.table)
    report.problems.sort(key=lambda e: e.path)
    if strict and report.problems:
        report.strict_aborted = True
        return report
    if not tables:
        return report
    table = footer_members.concat_rows(tables)
    # spans a continuous-mode job sent before any incident name none: together they are a
    # snapshot of the running job, and its manifest says so (see analysis.snapshots)
    table = table.append_column("_continuous", pc.equal(table["incident"], UNKNOWN))
    for column, value in (("job", job), ("incident", incident)):
        if value is not None:
            config.validate_partition_value(column, value)
            table = table.set_column(
                table.schema.get_field_index(column),
                column,
                pa.repeat(pa.scalar(value, pa.string()), len(table)),
            )
    table = unique_entries(table)
    streamed = continuous_incidents(table, "_continuous")
    table = table.drop_columns(["_continuous"])
    for column in ("job", "incident"):
        for value in pc.unique(table[column]).to_pylist():
            config.validate_partition_value(column, value)
    report.files_written = write_rows(table, archive)
    for job_name, incident_name in streamed:
        mark_snapshot(archive, job_name, incident_name)
    report.entries = table.num_rows
    report.ranks = sorted(pc.unique(table["rank"]).to_pylist())
    jobs = sorted(pc.unique(table["job"]).to_pylist())
    report.job = ",".join(jobs)
    pairs = (
        table.group_by(["job", "incident"])
        .aggregate([("time_created_ns", "min"), ("time_created_ns", "max")])
        .to_pylist()
    )
    pairs.sort(key=lambda p: (p["time_created_ns_min"] or 0, p["job"], p["incident"]))
    report.incidents = list(dict.fromkeys(p["incident"] for p in pairs))
    report.job_incidents = list(dict.fromkeys((p["job"], p["incident"]) for p in pairs))
    for pair in pairs:
        manifest = read_manifest(archive, pair["job"], pair["incident"])
        first, last = pair["time_created_ns_min"], pair["time_created_ns_max"]
        report.imported.append(
            IncidentImported(
                incident=pair["incident"]
                if len(jobs) == 1
                else f"{pair['job']}/{pair['incident']}",
                ranks=manifest.ranks if manifest else (),
                missing_ranks=manifest.missing_ranks if manifest else (),
                time_span=(first, last) if first is not None and last is not None else None,
            )
        )
    return report
