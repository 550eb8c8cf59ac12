"""``fr-otel incidents``: what an archive holds, one line per incident."""

from __future__ import annotations

from pathlib import Path

import click

from fr_otel.cli._errors import EXIT_BAD_INPUT, EXIT_OK
from fr_otel.cli._live import live_records
from fr_otel.errors import ArchiveError
from fr_otel.report.live_shown import Shown, naming


@click.command("incidents")
@click.argument("archive", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--job", default=None, help="Only this job's incidents.")
@click.option(
    "--analyze",
    "run_analysis",
    is_flag=True,
    help="Also analyse each incident and show its root finding (takes longer).",
)
def incidents(archive: Path, job: str | None, run_analysis: bool) -> int:
    """List the incidents of ARCHIVE: job, incident, ranks and missing ranks, time span.

    With --analyze, each line ends with the incident's root finding. Under an incident
    that the live check of `fr-otel run` named while the job ran, its line; then, per
    job, the live check's records that name no incident here (stall suspects, a verdict
    whose ranks had all ended). Pass the job and incident to `fr-otel analyze ARCHIVE
    --job J --incident I`.
    """
    from fr_otel.analysis.source import is_archive, summarize_incidents
    from fr_otel.archive.manifest import describe_ranks, describe_span

    if not is_archive(archive):
        raise ArchiveError(f"{archive} is not an archive (no job=*/incident=* folders inside)")
    summaries = summarize_incidents(archive, job)
    if not summaries:
        raise ArchiveError(f"{archive} holds no incidents")
    for summary in summaries:
        for problem in summary.problems:
            click.echo(f"fr-otel: {problem} (its rank counts as without a dump)", err=True)
    live = live_records(archive, job)
    for summary in summaries:
        parts = [f"job={summary.job} incident={summary.incident}"]
        if summary.writer is not None:
            parts.append(f"being written by {summary.writer.describe()}")
        parts.append(f"ranks {describe_ranks(summary.ranks)} ({len(summary.ranks)})")
        if summary.missing_ranks is None:
            parts.append("missing ranks unknown (no manifest)")
        else:
            parts.append(f"missing {describe_ranks(summary.missing_ranks)}")
        parts.append(f"{summary.entries} entries")
        if summary.time_span is not None:
            parts.append(describe_span(summary.time_span))
        if summary.problems:
            parts.append(f"{len(summary.problems)} unreadable file(s)")
        if run_analysis:
            parts.append(_root(archive, summary.job, summary.incident, summary.writer is not None))
        click.echo("  ".join(parts))
        for named in naming(live, summary.job, summary.incident):
            click.echo(f"  the live check named it while the job ran: {named.line}")
    _unnamed(live, {(s.job, s.incident) for s in summaries})
    return EXIT_OK if summaries else EXIT_BAD_INPUT


def _unnamed(live: list[Shown], incidents: set[tuple[str, str]]) -> None:
    """The records that name no incident of the archive, per job, with where each is."""
    jobs: dict[str, list[Shown]] = {}
    for shown in live:
        if (shown.job, shown.incident) not in incidents:
            jobs.setdefault(shown.job or "?", []).append(shown)
    for job, records in sorted(jobs.items()):
        click.echo(f"\njob={job}: the live check's records that name no incident here:")
        for shown in records:
            missing = f" (names incident {shown.incident}, not here)" if shown.incident else ""
            click.echo(f"  {shown.line}{missing} (record: {shown.record.path})")


def _root(archive: Path, job: str, incident: str, busy: bool) -> str:
    if busy:
        return "root: not analysed (being written)"
    from fr_otel.analysis import analyze
    from fr_otel.analysis.source import reading_damaged_files

    try:
        analysis = reading_damaged_files(lambda: analyze(archive, job=job, incident=incident))
    except ArchiveError as exc:
        return f"root: not analysed ({str(exc).splitlines()[0]})"
    if analysis.healthy:
        return "healthy"
    if analysis.root_cause is None:
        return f"slow, not stuck: {analysis.findings[0].kind}: {analysis.findings[0].summary}"
    root = analysis.findings[analysis.root_cause]
    return f"root: {root.kind}: {root.summary}"
