"""``fr-otel analyze``: name the culprit rank, the collective and the line of code."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from fr_otel.cli._errors import EXIT_FINDINGS, EXIT_OK
from fr_otel.stacks import call_site

if TYPE_CHECKING:
    from fr_otel.analysis import Analysis, Finding


def _frame_line(frame: dict[str, Any]) -> str:
    return f"{frame.get('name')} at {frame.get('filename')}:{frame.get('line')}"


def _where(finding: Finding) -> str | None:
    """'rank 8 at train.py:141 in step; its peers at train.py:139 in step'."""
    culprit_frames = finding.frames.get("culprit") or {}
    parts = []
    for rank, frames in sorted(culprit_frames.items(), key=lambda kv: int(kv[0]))[:3]:
        site = call_site(frames)
        if site:
            parts.append(f"rank {rank} at {site}")
    majority_site = call_site(finding.frames.get("majority"))
    if majority_site:
        parts.append(f"its peers at {majority_site}" if parts else f"at {majority_site}")
    return "; ".join(parts) or None


def _stacks(finding: Finding, out: TextIO) -> None:
    culprit_frames = finding.frames.get("culprit") or {}
    for rank, frames in sorted(culprit_frames.items(), key=lambda kv: int(kv[0]))[:2]:
        if frames:
            out.write(f"      stack of rank {rank} (innermost first):\n")
            for frame in frames[:8]:
                out.write(f"        {_frame_line(frame)}\n")
    majority = finding.frames.get("majority")
    if majority:
        out.write(f"      stack of rank {finding.frames.get('majority_rank')} (majority):\n")
        for frame in majority[:8]:
            out.write(f"        {_frame_line(frame)}\n")
    for side in finding.frames.get("sides", []):
        if side.get("frames"):
            out.write(f"      stack of ranks {side['ranks']}:\n")
            for frame in side["frames"][:8]:
                out.write(f"        {_frame_line(frame)}\n")


def render_text(analysis: Analysis, out: TextIO, *, verbose: bool = False) -> None:
    """Root cause first, in a few lines; then every finding."""
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
        return
    root = analysis.findings[analysis.root_cause or 0]
    out.write(f"ROOT CAUSE: {root.summary}\n")
    where = _where(root)
    if where:
        out.write(f"  {where}\n")
    consequences = sum(1 for f in analysis.findings if f.consequence_of is not None)
    out.write(
        f"\n{header}; {len(analysis.findings)} finding(s), {consequences} of them consequences"
        " of an earlier one\n\n"
    )
    for index, finding in enumerate(analysis.findings):
        tag = (
            "root cause"
            if index == analysis.root_cause
            else (
                f"consequence of [{finding.consequence_of}]"
                if finding.consequence_of is not None
                else "independent"
            )
        )
        culprits = ", ".join(map(str, finding.culprit_ranks)) or "none"
        out.write(f"[{index}] {finding.kind} ({tag}); culprit ranks: {culprits}\n")
        out.write(f"    {finding.summary}\n")
        where = _where(finding)
        if where:
            out.write(f"    {where}\n")
        if verbose or index == analysis.root_cause:
            _stacks(finding, out)


def render_json(analysis: Analysis, out: TextIO) -> None:
    json.dump(analysis.to_dict(), out, indent=2, default=str)
    out.write("\n")


@click.command("analyze")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--job", default=None, help="Job to analyse (default: the archive's latest).")
@click.option("--incident", default=None, help="Incident to analyse (default: the latest).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text for people, json for tools (a stable contract).",
)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write here.")
@click.option("--stacks", is_flag=True, help="Text: show the stacks of every finding.")
def analyze_(
    path: Path,
    job: str | None,
    incident: str | None,
    fmt: str,
    output: Path | None,
    stacks: bool,
) -> int:
    """Find what broke a job: the culprit rank, the collective and the line of code.

    PATH is an archive written by `fr-otel import`, or dump files or a folder of them
    (imported on the fly). Exit code 0: no problems found; 1: findings; 2: unusable input.
    """
    from fr_otel.analysis import analyze

    analysis = analyze(path, job=job, incident=incident)
    for problem in analysis.input_problems:
        click.echo(
            f"fr-otel: {problem['path']}: {problem['problem']}: {problem['detail']}"
            " (analysed without it)",
            err=True,
        )
    if output is not None:
        with output.open("w") as handle:
            (
                render_json(analysis, handle)
                if fmt == "json"
                else render_text(analysis, handle, verbose=stacks)
            )
    elif fmt == "json":
        render_json(analysis, sys.stdout)
    else:
        render_text(analysis, sys.stdout, verbose=stacks)
    return EXIT_OK if analysis.healthy else EXIT_FINDINGS
