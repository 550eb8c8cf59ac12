"""One incident in, an ``Analysis`` out: the SQL passes, then the finding passes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb

from fr_otel.analysis import divergence, rootcause, rules, waits
from fr_otel.analysis.findings import Analysis, Finding, GroupRef
from fr_otel.analysis.source import Incident, open_source
from fr_otel.analysis.sqlfiles import run_file, sql_files

SqlTracer = Callable[[str], None]


def _groups(connection: duckdb.DuckDBPyConnection) -> dict[str, GroupRef]:
    return {
        gkey: GroupRef(name=name, desc=desc, ranks=tuple(members or ()), key=gkey)
        for gkey, name, desc, members in connection.execute(
            "SELECT gkey, pg_name, pg_desc, members FROM groups"
        ).fetchall()
    }


def _merge_same_slot(findings: list[Finding], extra: list[Finding]) -> list[Finding]:
    """A rule finding at a slot a divergence finding already names adds evidence to it."""
    by_slot = {(f.group.key, f.collective_seq_id, f.kind): f for f in findings}
    for finding in extra:
        twin = by_slot.get((finding.group.key, finding.collective_seq_id, finding.kind))
        if twin is None:
            findings.append(finding)
            by_slot[(finding.group.key, finding.collective_seq_id, finding.kind)] = finding
        else:
            twin.evidence.setdefault("rule", finding.evidence)
    return findings


def analyze_connection(connection: duckdb.DuckDBPyConnection, incident: Incident) -> Analysis:
    """Analyse ``incident`` in a connection whose ``src`` view holds canonical rows."""
    params = {"job": incident.job, "incident": incident.incident}
    for name in sql_files():
        run_file(connection, name, params)
    groups = _groups(connection)
    dumped = {r for (r,) in connection.execute("SELECT rank FROM dumped").fetchall()}
    timing_known = bool(connection.execute("SELECT bool_or(any_started) FROM dumped").fetchone()[0])
    expected: set[int] = set()
    world_size = None
    for group in groups.values():
        expected.update(group.ranks or ())
        if group.desc == "default_pg" and group.ranks:
            world_size = len(group.ranks)
    if world_size is None and expected:
        world_size = max(expected) + 1
    heads = waits.load_heads(connection)

    findings: list[Finding] = []
    for view in divergence.load_group_views(connection, groups):
        findings.extend(divergence.classify(view))
    findings = _merge_same_slot(findings, rules.shape_rule_findings(connection, groups))
    findings = _merge_same_slot(findings, rules.all_to_all_findings(connection, groups))
    findings.extend(waits.cross_pg_deadlocks(connection, heads, groups))
    findings.extend(waits.p2p_unmatched(connection, groups))
    by_slot = {(f.group.key, f.collective_seq_id): f for f in findings}
    for stuck in waits.stuck_in_flight(connection, heads, groups, dumped, timing_known):
        # a collective that never completed because its sizes were wrong is one finding
        known = by_slot.get((stuck.group.key, stuck.collective_seq_id))
        if known is None:
            findings.append(stuck)
        else:
            known.evidence["never_completed"] = stuck.evidence
    ordered, root = rootcause.rank_findings(connection, findings, heads, groups)
    return Analysis(
        job=incident.job,
        incident=incident.incident,
        world_size=world_size,
        ranks=sorted(dumped),
        missing_dumps=sorted(expected - dumped),
        findings=ordered,
        root_cause=root,
    )


def analyze(
    path: str | Path, *, job: str | None = None, incident: str | None = None
) -> Analysis:
    """Analyse an archive, or dumps imported on the fly (see ``open_source``)."""
    with open_source(path, job=job, incident=incident) as source:
        return analyze_connection(source.connection, source.incident)
