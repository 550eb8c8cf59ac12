"""The incident report as one self-contained HTML page.

The verdict and the findings are written here as HTML, so they read without scripts; the
grid is drawn by ``assets/report.js`` on a canvas from the data embedded in the page (a
1,024-rank grid would be 200,000 DOM nodes). The page loads nothing: its content security
policy forbids every request, so it opens from disk, inside a ticket, offline.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any

from fr_otel import __version__
from fr_otel.analysis import Analysis, Finding
from fr_otel.analysis.findings import RANKS_IN_WORDS
from fr_otel.analysis.kinds import PERFORMANCE_KINDS, words
from fr_otel.analysis.stragglers import StragglerEvidence
from fr_otel.report.build import IncidentReport
from fr_otel.report.grid import STATES, Grid
from fr_otel.report.lateness import LatenessStrip
from fr_otel.report.words import code_locations, listed, outline

_MARKER = re.compile(r"__(TITLE|STYLE|VERDICT|FINDINGS|DATA|SCRIPT|VERSION)__")


def _asset(name: str) -> str:
    return (resources.files("fr_otel.report") / "assets" / name).read_text(encoding="utf-8")


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _ranks_text(ranks: list[int]) -> str:
    # the page names as many ranks as a finding's sentence; the grid's data has them all
    return listed(ranks, RANKS_IN_WORDS)


def _group_text(finding: Finding) -> str:
    group = finding.group
    size = f", {len(group.ranks)} ranks" if group.ranks else ""
    return f"{group.desc or '?'} (pg {group.name}{size})"


def _verdict(analysis: Analysis, said: Sequence[str]) -> str:
    header = f"{len(analysis.ranks)} rank dumps" + (
        f" of {analysis.world_size}" if analysis.world_size else ""
    )
    notes = []
    if analysis.missing_dumps:
        notes.append(
            f"No dump from ranks {_e(_ranks_text(analysis.missing_dumps))}: their cells are"
            " unknown, and they are never blamed."
        )
    for problem in analysis.input_problems:
        notes.append(
            f"Not read: {_e(problem['path'])}: {_e(problem['problem'])}: {_e(problem['detail'])}"
        )
    notes.extend(_e(words) for words in said)
    notes_html = "".join(f'<p class="note">{note}</p>' for note in notes)
    if not analysis.healthy and analysis.root_cause is None:
        return _slow_verdict(analysis, header, notes_html)
    if analysis.healthy or analysis.root_cause is None:
        return (
            '<section id="verdict" class="healthy"><h2>No problems found</h2>'
            f"<p>{_e(header)}: every collective matched across ranks.</p>{notes_html}</section>"
        )
    root = analysis.findings[analysis.root_cause]
    facts = [
        (
            "Root cause",
            f"{_e(words(root.kind))} (<code>{_e(root.kind)}</code>)",
        ),
        (
            "Culprit ranks",
            f'<span class="culprits">{_e(_ranks_text(sorted(root.culprit_ranks)))}</span>'
            if root.culprit_ranks
            else "none named",
        ),
    ]
    if root.waiting_ranks:
        facts.append(
            (
                "Waiting (not at fault)",
                f'<span class="waiting">{_e(_ranks_text(root.waiting_ranks))}</span>',
            )
        )
    facts.append(("Process group", _e(_group_text(root))))
    if root.collective_seq_id is not None:
        facts.append(
            (
                "Collective",
                f"#{_e(root.collective_seq_id)}" + (f" ({_e(root.op)})" if root.op else ""),
            )
        )
    locations = code_locations(root)
    if locations:
        items = "".join(
            f"<li><b>{_e(who or 'at')}</b> <code>{_e(site)}</code></li>" for who, site in locations
        )
        facts.append(("Code", f'<ul class="sites">{items}</ul>'))
    scope = f"{header}; {len(analysis.findings)} finding(s)."
    return _verdict_section("Root cause", root.summary, facts, scope, notes_html)


def _verdict_section(
    title: str, summary: str, facts: list[tuple[str, str]], scope: str, notes_html: str
) -> str:
    """The verdict box: a title with the summary, a table of facts (HTML values), the scope."""
    rows = "".join(f"<tr><th>{label}</th><td>{value}</td></tr>" for label, value in facts)
    return (
        '<section id="verdict" class="problem">'
        f'<h2>{_e(title)}: <span id="verdict-summary">{_e(summary)}</span></h2>'
        f'<table class="facts">{rows}</table>'
        f'<p class="scope">{_e(scope)}</p>'
        f"{notes_html}</section>"
    )


def _slow_verdict(analysis: Analysis, header: str, notes_html: str) -> str:
    """Only performance findings: the job is slow, not stuck; nothing is a root cause."""
    first = analysis.findings[0]
    ranks = sorted({r for f in analysis.findings for r in f.culprit_ranks})
    facts = [
        ("Stragglers", f'<span class="culprits">{_e(_ranks_text(ranks))}</span>'),
        ("Process group", _e(_group_text(first))),
    ]
    site = None
    evidence = first.facts
    if isinstance(evidence, StragglerEvidence):
        facts.append(
            (
                "Lateness",
                f"median {_e(evidence.lateness_ms.get('median'))} ms, p90"
                f" {_e(evidence.lateness_ms.get('p90'))} ms; about"
                f" {_e(evidence.time_lost_ms_per_step)} ms lost per step",
            )
        )
        example = first.entry_info(evidence.example)
        site = example.call_site if example is not None else None
    if site:
        facts.append(("Code", f"<code>{_e(site)}</code>"))
    scope = f"{header}; {len(analysis.findings)} finding(s), no hang."
    return _verdict_section("Slow, not stuck", first.summary, facts, scope, notes_html)


def _lateness(strip: LatenessStrip | None) -> str:
    """Per rank, its lateness over the window as a row of bars (oldest first)."""
    if strip is None or not strip.ranks:
        return ""
    top = max((v for r in strip.ranks for v in r.buckets_ms), default=0.0) or 1.0
    width, height = 240, 14
    rows = []
    for row in strip.ranks:
        step = width / max(len(row.buckets_ms), 1)
        colour = "#c62828" if row.straggler else "#607d8b"
        bars = "".join(
            f'<rect x="{i * step:.1f}" y="{height - max(v / top * height, 0.5):.1f}"'
            f' width="{max(step - 0.5, 0.5):.1f}" height="{max(v / top * height, 0.5):.1f}"/>'
            for i, v in enumerate(row.buckets_ms)
        )
        rows.append(
            f"<tr><th>rank {row.rank}</th><td>"
            f'<svg width="{width}" height="{height}" fill="{colour}" role="img"'
            f' aria-label="lateness of rank {row.rank}">{bars}</svg></td>'
            f"<td>median {row.median_ms:g} ms, p90 {row.p90_ms:g} ms</td></tr>"
        )
    shown = f"{len(strip.ranks)} of {strip.ranks_total} ranks"
    return (
        '<section id="lateness"><h2>Lateness per rank</h2>'
        f'<p class="hint">How long after its group\'s first member each rank reached its'
        f" collectives, all of them (a finding's figures are for its call site alone), oldest"
        f" on the left (bar height up to {top:g} ms); {shown}: the"
        " stragglers (red), the latest others and the earliest.</p>"
        f'<table class="lateness">{"".join(rows)}</table></section>'
    )


def _findings(analysis: Analysis) -> str:
    if not analysis.findings:
        return ""
    # numbered by their "[index]" alone, which "consequence of [index]" refers to: not a
    # numbered list too ("0. [0]"); each cause followed by the findings it explains,
    # indented under it
    items = []
    for index, depth in outline(analysis):
        finding = analysis.findings[index]
        if finding.kind in PERFORMANCE_KINDS:
            tag = "performance, not a hang"
        elif index == analysis.root_cause:
            tag = "root cause"
        elif finding.consequence_of is not None:
            tag = f"consequence of [{finding.consequence_of}]"
        else:
            tag = "independent"
        # as ranks_words says it, the waiting ranks in their own colour (never the red)
        culprits = f"culprit ranks: {_ranks_text(finding.culprit_ranks) or 'none'}"
        waiting = (
            f'<span class="waiting-list">; waiting (not at fault):'
            f" {_e(_ranks_text(finding.waiting_ranks))}</span>"
            if finding.waiting_ranks
            else ""
        )
        items.append(
            f'<li class="depth-{depth}">'
            f'<a href="#grid-panel" class="finding" data-finding="{index}">'
            f"[{index}] <b>{_e(finding.kind)}</b> <i>({_e(tag)})</i>: {_e(finding.summary)}"
            f' <span class="culprit-list">{_e(culprits)}</span>{waiting}</a></li>'
        )
    return (
        '<section id="findings"><h2>Findings</h2><p class="hint">Select one to show its cells'
        f' in the grid.</p><ul class="findings">{"".join(items)}</ul></section>'
    )


def _finding_data(finding: Finding) -> dict[str, Any]:
    return {
        "kind": finding.kind,
        "desc": finding.group.desc or finding.group.name,
        "group": finding.group.name,
        "seq": finding.collective_seq_id,
        "op": finding.op,
        "culprits": sorted(finding.culprit_ranks),
        "waiting": sorted(finding.waiting_ranks),
        "summary": finding.summary,
    }


def _grid_data(grid: Grid) -> dict[str, Any]:
    created = [t for t in grid.cells["created_ns"] if t is not None]
    t0 = min(created) if created else 0
    cells = dict(grid.cells)
    # times as integer microseconds after the earliest entry: short numbers, exact enough
    cells["created_us"] = [
        (t - t0) // 1000 if t is not None else None for t in cells.pop("created_ns")
    ]
    cells["done_us"] = [(t - t0) // 1000 if t is not None else None for t in cells.pop("done_ns")]
    return {
        "t0_ns": t0,
        "states": list(STATES),
        "groups": grid.groups,
        "rows": {
            "rank": [r.rank for r in grid.rows],
            "group": [r.group for r in grid.rows],
            "dumped": [r.dumped for r in grid.rows],
            "first": [r.first_seq for r in grid.rows],
            "last": [r.last_seq for r in grid.rows],
        },
        "columns": {
            "desc": [c.group_desc for c in grid.columns],
            "p2p": [c.p2p for c in grid.columns],
            "seq": [c.seq for c in grid.columns],
            "sub": [c.sub for c in grid.columns],
        },
        "columns_total": grid.columns_total,
        "columns_total_by_desc": grid.columns_total_by_desc,
        "ranks_total": grid.ranks_total,
        "rank_step": grid.rank_step,
        "cells": cells,
        "signatures": grid.signatures,
        "stacks": grid.stacks,
        "traces": grid.traces,
        "findings": grid.findings,
    }


def _json_for_script(value: object) -> str:
    # inside <script>, "</" would end the element and "<!--" would open a comment
    text = json.dumps(value, separators=(",", ":"), default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(
    report: IncidentReport, *, trace_url: str | None = None, said: Sequence[str] = ()
) -> str:
    """The report as one HTML document. ``trace_url``: a template with ``{trace_id}``
    (and optionally ``{span_id}``) that makes each cell link to its trace. ``said``: plain
    sentences the caller adds to the verdict (what the live check named while the job
    ran), each a note."""
    analysis = report.analysis
    data = {
        "version": __version__,
        "job": analysis.job,
        "incident": analysis.incident,
        "world_size": analysis.world_size,
        "missing_dumps": analysis.missing_dumps,
        "root_cause": analysis.root_cause,
        "findings": [_finding_data(f) for f in analysis.findings],
        "trace_url": trace_url,
        "grid": _grid_data(report.grid),
    }
    title = f"fr-otel: job {analysis.job}, incident {analysis.incident}"
    page = _asset("report.html")
    replacements = {
        "__TITLE__": _e(title),
        "__STYLE__": _asset("report.css"),
        "__VERDICT__": _verdict(analysis, said),
        "__FINDINGS__": _findings(analysis) + _lateness(report.lateness),
        "__DATA__": _json_for_script(data),
        "__SCRIPT__": _asset("report.js"),
        "__VERSION__": _e(__version__),
    }
    # one pass: text inserted (a summary, a file name) is never scanned for markers
    return _MARKER.sub(lambda match: replacements[match.group(0)], page)
