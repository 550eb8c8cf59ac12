"""``fr_otel.export``: an archived incident's rows (and, if asked, the analyzer's verdicts)
out to sinks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fr_otel.archive.incidents import Incident, pick_incident
from fr_otel.archive.read import read_incident
from fr_otel.errors import ConfigError
from fr_otel.otel.payload import span_count
from fr_otel.sinks.base import ExportResult, RecordSink, SpanSink

if TYPE_CHECKING:
    import pyarrow as pa
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from fr_otel.analysis import Analysis
    from fr_otel.errors import DumpError


@dataclass(kw_only=True)
class ExportInput:
    """What is about to be exported, as ``before_export`` sees it."""

    incident: Incident
    table: pa.Table
    """The incident's rows; with ``findings_only`` only its ``run_id`` column."""
    problems: list[DumpError]
    """Rank files left out: they could not be read."""
    verdicts: list[ExportTraceServiceRequest] = field(default_factory=list)
    analysis: Analysis | None = None
    """The analyzer's verdict, when the findings were asked for."""
    run_id: str | None = None
    """The rows' run id, when they have one (their traces' ids include it)."""
    entries: bool = True
    """The rows' spans go out (not so with ``findings_only``)."""

    @property
    def verdict_spans(self) -> int:
        return sum(span_count(verdict) for verdict in self.verdicts)

    @property
    def spans(self) -> int:
        """Spans a span sink will be given."""
        return (self.table.num_rows if self.entries else 0) + self.verdict_spans


@dataclass(kw_only=True)
class ExportReport:
    """What ``export`` did: the incident, the files it left out, one result per sink."""

    incident: Incident
    problems: list[DumpError]
    results: list[ExportResult] = field(default_factory=list)
    """In the order of the sinks; empty when there was nothing to export."""
    verdict_spans: int = 0

    @property
    def ok(self) -> bool:
        return all(result.ok for result in self.results)


def export(
    archive: str | Path,
    sinks: Sequence[RecordSink],
    *,
    job: str | None = None,
    incident: str | None = None,
    findings: bool = False,
    findings_only: bool = False,
    before_export: Callable[[ExportInput], None] | None = None,
    after_each: Callable[[ExportResult], None] | None = None,
) -> ExportReport:
    """Export one incident of ``archive`` to each of ``sinks``, in order.

    The incident is the one named, or the only one (``IncidentChoiceError`` lists them
    otherwise). Rank files that cannot be read are left out and listed in the report's
    ``problems``. With ``findings``, the analyzer runs and each finding goes to the span
    sinks as a verdict span in the trace of its collective; with ``findings_only``, the
    verdicts go alone (for an incident whose spans a backend already holds), and a
    healthy incident exports nothing. ``before_export`` sees what is about to go out (or
    that nothing will); ``after_each`` each sink's result as soon as it is done. The
    caller owns the sinks: they are not shut down here.
    """
    archive = Path(archive)
    findings = findings or findings_only
    if findings_only and not all(isinstance(sink, SpanSink) for sink in sinks):
        raise ConfigError("findings are spans: with findings_only every sink must take spans")
    chosen = pick_incident(archive, job, incident)
    # the verdicts alone need only the run id (their traces' ids include it), not every
    # entry of every rank
    # every span codec takes a group's member list once for all its rows
    rows = read_incident(
        archive, chosen, columns=["run_id"] if findings_only else None, shared_members=True
    )
    what = ExportInput(
        incident=chosen,
        table=rows.table,
        problems=rows.problems,
        entries=not findings_only,
        run_id=run_id_of(rows.table),
    )
    if findings:
        what.analysis, what.verdicts = _verdicts(archive, chosen, what.run_id)
    report = ExportReport(incident=chosen, problems=rows.problems, verdict_spans=what.verdict_spans)
    if before_export is not None:
        before_export(what)
    if findings_only and not what.verdicts:
        return report
    table = None if findings_only else rows.table
    for sink in sinks:
        if isinstance(sink, SpanSink):
            result = sink.export_spans(table, what.verdicts)
        else:
            result = sink.export(rows.table)
        report.results.append(result)
        if after_each is not None:
            after_each(result)
    return report


def run_id_of(table: pa.Table) -> str | None:
    """The run id of an incident's rows, when they all have the same one."""
    runs = set(table.column("run_id").unique().to_pylist())
    return runs.pop() if len(runs) == 1 else None


def _verdicts(
    archive: Path, chosen: Incident, run_id: str | None
) -> tuple[Analysis, list[ExportTraceServiceRequest]]:
    from fr_otel.analysis import analyze
    from fr_otel.otel.verdict import verdict_spans

    analysis = analyze(archive, job=chosen.job, incident=chosen.incident)
    verdict = verdict_spans(analysis, run_id=run_id)
    return analysis, [verdict] if verdict.resource_spans else []
