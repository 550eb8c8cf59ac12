"""``fr-otel analyze``: name the culprit rank, the collective and the line of code."""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import click

from fr_otel.cli._errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK
from fr_otel.cli._exit import leave_to_exit, may_end_quickly
from fr_otel.cli._gc import collect_rarely
from fr_otel.cli._options import format_option
from fr_otel.errors import ArchiveError
from fr_otel.report.defaults import DEFAULT_COLUMNS, DEFAULT_MAX_RANKS
from fr_otel.report.live_shown import render_json
from fr_otel.report.words import outline, ranks_words, role
from fr_otel.report.words import where as _where

if TYPE_CHECKING:
    from fr_otel.analysis import Analysis, Finding
    from fr_otel.report.live_shown import Shown

TEXT_RANKS = 32
"""Ranks a text finding lists by number (the JSON lists them all)."""


def _frame_line(frame: dict[str, Any]) -> str:
    return f"{frame.get('name')} at {frame.get('filename')}:{frame.get('line')}"


def _stacks(finding: Finding, out: TextIO, indent: str = "") -> None:
    head, line = indent + "      ", indent + "        "
    shown = [
        (f"rank {rank} (innermost first)", frames) for rank, frames in finding.culprit_stacks()[:2]
    ]
    shown.append(
        (f"rank {finding.stacks.majority_rank} (majority)", finding.stack(finding.stacks.majority))
    )
    shown += [(f"ranks {ranks}", frames) for ranks, frames in finding.side_stacks()]
    for who, frames in shown:
        if frames:
            out.write(f"{head}stack of {who}:\n")
            for frame in frames[:8]:
                out.write(f"{line}{_frame_line(frame)}\n")


def render_text(
    analysis: Analysis, out: TextIO, *, verbose: bool = False, live: Shown | None = None
) -> None:
    """Root cause first, in a few lines, with what the live check named while the job ran
    (``live``) and whether the analysis agrees; then every finding, each cause followed by
    the findings it explains, indented under it."""
    dumped = f"{len(analysis.ranks)} rank dumps"
    if analysis.world_size:
        dumped += f" of {analysis.world_size}"
    header = f"job {analysis.job}, incident {analysis.incident}: {dumped}"
    if analysis.missing_dumps:
        shown = ", ".join(map(str, analysis.missing_dumps[:20]))
        more = "..." if len(analysis.missing_dumps) > 20 else ""
        header += f"; no dump from ranks {shown}{more} (unknown, never blamed)"
    if analysis.healthy:
        out.write(f"No problems found. {header}\n")
        _live_lines(analysis, live, out)
        return
    if analysis.root_cause is None:
        # only performance findings: the job is slow, not stuck, and nothing is a root cause
        root = analysis.findings[0]
        out.write(f"SLOW, NOT STUCK: {root.summary}\n")
    else:
        root = analysis.findings[analysis.root_cause]
        out.write(f"ROOT CAUSE: {root.summary}\n")
    where = _where(root)
    if where:
        out.write(f"  {where}\n")
    _live_lines(analysis, live, out)
    consequences = sum(1 for f in analysis.findings if f.consequence_of is not None)
    out.write(
        f"\n{header}; {len(analysis.findings)} finding(s), {consequences} of them consequences"
        " of an earlier one\n\n"
    )
    for index, depth in outline(analysis):
        finding = analysis.findings[index]
        indent = "    " * depth
        who = ranks_words(finding, limit=TEXT_RANKS)
        out.write(f"{indent}[{index}] {finding.kind} ({role(analysis, index)}); {who}\n")
        out.write(f"{indent}    {finding.summary}\n")
        where = _where(finding)
        if where:
            out.write(f"{indent}    {where}\n")
        if verbose or index == analysis.root_cause:
            _stacks(finding, out, indent)


def _live_lines(analysis: Analysis, live: Shown | None, out: TextIO) -> None:
    from fr_otel.report.live_shown import agreement_words, named_words

    if live is not None:
        out.write(f"  {named_words(live)}\n  {agreement_words(live, analysis)}\n")


_F = TypeVar("_F", bound=Callable[..., Any])


def _count_option(flag: str, default: int, help: str) -> Callable[[_F], _F]:
    """An option taking a count of at least one."""
    return click.option(
        flag, type=click.IntRange(min=1), default=default, show_default=True, help=help
    )


@click.command("analyze")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--job", default=None, help="Job to analyse (default: the only one; else say which).")
@click.option(
    "--incident",
    default=None,
    help="Incident to analyse (default: the only one; with several, they are listed and"
    " the exit code is 2: see fr-otel incidents).",
)
@format_option(
    ["text", "json", "html"],
    help="text for people, json for tools (a stable contract), html: a self-contained"
    " report with the cross-rank grid (use with -o).",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here.")
@click.option("--stacks", is_flag=True, help="Text: show the stacks of every finding.")
@_count_option(
    "--columns",
    DEFAULT_COLUMNS,
    "HTML: schedule positions in the grid (the last ones, keeping the divergence).",
)
@_count_option(
    "--max-ranks",
    DEFAULT_MAX_RANKS,
    "HTML: ranks in the grid; past it, those the findings name and an even sample.",
)
@click.option(
    "--trace-url",
    default=None,
    metavar="TEMPLATE",
    help="HTML: link each cell to its trace, e.g."
    " 'http://localhost:16686/trace/{trace_id}?uiFind={span_id}' (default: FR_OTEL_TRACE_URL).",
)
def analyze_(
    path: Path,
    job: str | None,
    incident: str | None,
    fmt: str,
    output: Path | None,
    stacks: bool,
    columns: int,
    max_ranks: int,
    trace_url: str | None,
) -> int:
    """Find what broke a job: the culprit rank, the collective and the line of code.

    PATH is an archive written by `fr-otel import`, or dump files or a folder of them,
    or the recorder's ring files (ARCHIVE/_rings) (imported on the fly). A file that
    cannot be read is named and its rank counts as without a dump (unknown, never
    blamed). Exit code 0: no problems found; 1: findings; 2: unusable input (or several
    incidents and none chosen); 3: internal error.

    With an OTLP endpoint configured (OTEL_EXPORTER_OTLP_ENDPOINT, as fr-otel export
    reads it), findings also go to that Collector as the incident's log record
    (fr_otel.incident) and count (fr_otel.incidents); what it does not take waits in the
    archive's spool for fr-otel export ARCHIVE --otlp --resend.
    """
    may_end_quickly()  # nothing runs on once the verdict is written
    collect_rarely()
    started_ns = time.time_ns()
    given = path
    with contextlib.ExitStack() as stack:
        rings = _rings_as_archive(path, job, incident, stack)
        if rings is False:
            return EXIT_BAD_INPUT
        if rings is not True:
            path, job, incident = rings, None, None  # a temporary archive of exactly these
        if fmt == "html":
            code, analysis = _html(path, job, incident, output, columns, max_ranks, trace_url)
            _signal(analysis, path, given, started_ns)
            return code
        analysis = _analysed(path, job, incident, stack)
        _report_problems(analysis)
        live = _live(path, analysis.job, analysis.incident, rings is True)
        if output is not None:
            with output.open("w") as handle:
                (
                    render_json(analysis, handle, live=live)
                    if fmt == "json"
                    else render_text(analysis, handle, verbose=stacks, live=live)
                )
        elif fmt == "json":
            render_json(analysis, sys.stdout, live=live)
        else:
            render_text(analysis, sys.stdout, verbose=stacks, live=live)
        sys.stdout.flush()  # the verdict is out before the analysis is closed
        _signal(analysis, path, given, started_ns)
        leave_to_exit(stack)  # and the exit need not wait for its closing either
        return EXIT_OK if analysis.healthy else EXIT_FINDINGS


def _signal(analysis: Analysis, path: Path, given: Path, started_ns: int) -> None:
    """Findings, and an OTLP endpoint configured (``OTEL_EXPORTER_OTLP_*``, as ``fr-otel
    export`` reads them): the incident's log record and count go to that Collector, what
    it does not take to ``given``'s spool when it is an archive. Said on stderr; a
    failure never changes the exit code, the verdict is out."""
    if analysis.healthy:
        return
    from fr_otel import config
    from fr_otel.analysis.source import is_archive
    from fr_otel.cli._incident_signal import ANALYZE_DEADLINE_S, said, send_verdict

    where = f"job={analysis.job} incident={analysis.incident}"
    try:
        settings = config.otlp_settings()
        if settings is None:
            return
        spool_dir = given / "_spool" if is_archive(given) else None
        delivered = send_verdict(
            analysis,
            settings,
            run_id=_run_id(path, analysis),
            started_ns=started_ns,
            deadline=time.monotonic() + ANALYZE_DEADLINE_S,
            spool_dir=spool_dir,
        )
    except Exception as exc:  # the verdict is out: this is said, and nothing else changes
        click.echo(
            f"fr-otel: {where}: the incident's log record and count not sent: {exc}", err=True
        )
        return
    if delivered is not None:
        resend = f"fr-otel export {given} --otlp --resend"
        click.echo(f"fr-otel: {said(delivered, settings, where, resend)}", err=True)


def _run_id(path: Path, analysis: Analysis) -> str | None:
    """The incident's rows' run id (their traces' ids include it), when ``path`` is an
    archive and they have one."""
    from fr_otel.analysis.source import is_archive

    if not is_archive(path):
        return None
    from fr_otel.archive.incidents import pick_incident
    from fr_otel.archive.read import read_incident
    from fr_otel.sinks.exporting import run_id_of

    chosen = pick_incident(path, analysis.job, analysis.incident)
    return run_id_of(read_incident(path, chosen, columns=["run_id"]).table)


def _analysed(
    path: Path, job: str | None, incident: str | None, stack: contextlib.ExitStack
) -> Analysis:
    """The analysis of ``path``, its session left open on ``stack``: closing it (DuckDB's
    tables; for dumps, the temporary archive) takes time that grows with the incident,
    time the verdict need not wait for."""
    from fr_otel.analysis.session import open_session
    from fr_otel.analysis.source import reading_damaged_files

    def attempt() -> Analysis:
        with contextlib.ExitStack() as session_stack:
            session = session_stack.enter_context(open_session(path, job=job, incident=incident))
            analysis = session.analysis
            stack.push(session_stack.pop_all())  # a failed attempt closes its own
        return analysis

    return reading_damaged_files(attempt)


def _live(path: Path, job: str, incident: str, as_given: bool) -> Shown | None:
    """The live check's record that names this incident, when ``path`` is an archive (its
    ``_live`` folder); a temporary archive of rings or dumps has none."""
    from fr_otel.analysis.source import is_archive
    from fr_otel.cli._live import live_records
    from fr_otel.report.live_shown import naming

    if not as_given or not is_archive(path):
        return None
    named = naming(live_records(path, job), job, incident)
    return named[0] if named else None


def _rings_as_archive(
    path: Path, job: str | None, incident: str | None, stack: contextlib.ExitStack
) -> Path | bool:
    """For ring files (not an archive), a temporary archive holding them; True for
    anything else (analysed as it is); False when the rings cannot be analysed (said)."""
    from fr_otel.analysis.source import is_archive

    if is_archive(path):
        return True
    # not before: it brings in pyarrow.compute, a slow import that an archive's analysis
    # skips
    from fr_otel.archive.manifest import describe_ranks
    from fr_otel.recorder.ring_import import holds_rings, import_rings

    if not holds_rings(path):
        return True
    archive = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fr-otel-rings-")))
    imported = import_rings([path], archive, job, incident)
    for problem in imported.problems:
        click.echo(f"fr-otel: {problem}", err=True)
    for ranks in imported.running.values():
        click.echo(
            f"fr-otel: ranks {describe_ranks(ranks)} still running: their rings are read as a"
            " snapshot (ranks caught at different points of a running loop are no hang)",
            err=True,
        )
    if not imported.incidents:
        click.echo(f"fr-otel: {path}: no readable ring", err=True)
        return False
    if len(imported.incidents) > 1:
        click.echo(
            f"fr-otel: {path} holds the rings of {len(imported.incidents)} runs, never analysed"
            f" together: import them with fr-otel import {path} --archive ARCHIVE, then"
            " analyse each incident",
            err=True,
        )
        return False
    return archive


def _report_problems(analysis: Analysis) -> None:
    for problem in analysis.input_problems:
        click.echo(
            f"fr-otel: {problem['path']}: {problem['problem']}: {problem['detail']}"
            " (analysed without it: its rank is unknown)",
            err=True,
        )


def _html(
    path: Path,
    job: str | None,
    incident: str | None,
    output: Path | None,
    columns: int,
    max_ranks: int,
    trace_url: str | None,
) -> tuple[int, Analysis]:
    from fr_otel.analysis.source import reading_damaged_files
    from fr_otel.config import trace_url as configured_trace_url
    from fr_otel.report.build import build_report
    from fr_otel.report.html import render_html
    from fr_otel.report.live_shown import agreement_words, named_words

    template = configured_trace_url(trace_url)
    report = reading_damaged_files(
        lambda: build_report(
            path,
            job=job,
            incident=incident,
            columns=columns,
            max_ranks=max_ranks,
            trace_ids=template is not None,
            span_ids=template is not None and "{span_id}" in template,
        )
    )
    _report_problems(report.analysis)
    live = _live(path, report.analysis.job, report.analysis.incident, True)
    said = [] if live is None else [named_words(live), agreement_words(live, report.analysis)]
    page = render_html(report, trace_url=template, said=said)
    if output is None:
        sys.stdout.write(page)
    else:
        try:
            output.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise ArchiveError(f"{output}: cannot write the report: {exc.strerror}") from exc
        analysis = report.analysis
        verdict = (
            "no problems found"
            if analysis.healthy
            else analysis.findings[analysis.root_cause].summary
            if analysis.root_cause is not None
            else f"slow, not stuck: {analysis.findings[0].summary}"
        )
        click.echo(f"wrote {output} ({len(page) / 1e6:.1f} MB): {verdict}", err=True)
    return (EXIT_OK if report.analysis.healthy else EXIT_FINDINGS), report.analysis
