"""One incident in, an ``Analysis`` out: the SQL passes, then the finding passes."""

from __future__ import annotations

from pathlib import Path

import duckdb

from fr_otel.analysis import divergence, rootcause, rules, waits
from fr_otel.analysis.findings import Analysis, Finding, FrameRef, GroupRef
from fr_otel.analysis.source import Incident, open_source
from fr_otel.analysis.sqlfiles import run_file, sql_files
from fr_otel.archive.manifest import Manifest
from fr_otel.stacks import trimmed


def _groups(connection: duckdb.DuckDBPyConnection) -> dict[int, GroupRef]:
    return {
        gid: GroupRef(name=name, desc=desc, ranks=tuple(members or ()), key=gid)
        for gid, name, desc, members in connection.execute(
            "SELECT gid, pg_name, pg_desc, members FROM groups"
        ).fetchall()
    }


def _resolve_frames(
    connection: duckdb.DuckDBPyConnection, incident: Incident, findings: list[Finding]
) -> None:
    """Replace the (rank, record_id) references in findings by those entries' stacks.

    Stacks are the heaviest column; reading only the handful that findings show keeps
    the analysis fast.
    """
    refs: set[FrameRef] = set()

    def collect(value: object) -> None:
        if isinstance(value, tuple):
            refs.add(value)
        elif isinstance(value, dict):
            for item in value.values():
                collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)

    for finding in findings:
        collect(finding.frames)
        collect(finding.evidence)
    stacks: dict[FrameRef, list[dict[str, object]]] = {}
    details: dict[FrameRef, dict[str, object]] = {}
    if refs:
        connection.execute("CREATE OR REPLACE TEMP TABLE refs (rank BIGINT, record_id BIGINT)")
        connection.executemany("INSERT INTO refs VALUES (?, ?)", sorted(refs))
        # literal lists: DuckDB skips every file and row group that cannot hold them
        ranks = ", ".join(str(int(rank)) for rank in sorted({rank for rank, _ in refs}))
        records = ", ".join(str(int(record)) for record in sorted({r for _, r in refs}))
        rows = [
            row
            for row in connection.execute(
                "SELECT rank, record_id, frames, input_sizes, output_sizes, input_dtypes,"
                " output_dtypes, call_site FROM src"
                f" WHERE job = ? AND incident = ? AND rank IN ({ranks})"
                f" AND record_id IN ({records})",
                [incident.job, incident.incident],
            ).fetchall()
            if (row[0], row[1]) in refs
        ]
        for rank, record_id, frames, ins, outs, in_dtypes, out_dtypes, site in rows:
            stacks[(rank, record_id)] = trimmed(frames)
            details[(rank, record_id)] = {
                "input_sizes": ins,
                "output_sizes": outs,
                "input_dtypes": in_dtypes,
                "output_dtypes": out_dtypes,
                "call_site": site,
            }

    def resolve(value: object) -> object:
        if isinstance(value, tuple):
            return stacks.get(value, [])
        if isinstance(value, dict):
            entry = value.get("entry")
            if isinstance(entry, tuple):
                value = {k: v for k, v in value.items() if k != "entry"}
                value.update(details.get(entry, {}))
            return {key: resolve(item) for key, item in value.items()}
        if isinstance(value, list):
            return [resolve(item) for item in value]
        return value

    for finding in findings:
        finding.frames = resolve(finding.frames)  # type: ignore[assignment]
        finding.evidence = resolve(finding.evidence)  # type: ignore[assignment]


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


def _add_where_blocked(
    findings: list[Finding], heads: dict[int, waits.Head], groups: dict[int, GroupRef]
) -> None:
    """For ranks that never issued something, say what they are blocked in instead."""
    for finding in findings:
        if finding.kind not in ("missing_rank", "p2p_unmatched"):
            continue
        for rank in finding.culprit_ranks:
            head = heads.get(rank)
            if head is None:
                continue
            where = f"{head.op} {groups[head.gid].label()}" + (
                f" #{head.seq}" if not head.p2p else f" with rank {head.peer}"
            )
            culprits = finding.evidence.setdefault("culprits", {})
            entry = culprits.get(str(rank)) or {}
            entry["blocked_in"] = where
            culprits[str(rank)] = entry


_GROUPS_FROM_ROWS = """
CREATE OR REPLACE TEMP TABLE groups AS
SELECT CASE WHEN $gid_by_name THEN hash(pg_name) ELSE hash(pg_name, pg_ranks) END AS gid,
       any_value(pg_name) AS pg_name, any_value(pg_desc) AS pg_desc,
       list_sort(any_value(pg_ranks)) AS members
FROM src
WHERE job = $job AND incident = $incident
GROUP BY pg_name, pg_ranks
"""


def _create_groups(
    connection: duckdb.DuckDBPyConnection, incident: Incident, manifest: Manifest | None
) -> bool:
    """The ``groups`` table; returns whether group names alone identify groups."""
    if manifest is None:
        params = {"job": incident.job, "incident": incident.incident, "gid_by_name": False}
        connection.execute(_GROUPS_FROM_ROWS, params)
        return False
    names = [g.name for g in manifest.groups]
    by_name = len(names) == len(set(names))
    connection.execute(
        "CREATE OR REPLACE TEMP TABLE groups AS"
        " SELECT CASE WHEN $by_name THEN hash(name) ELSE hash(name, ranks) END AS gid,"
        "        name AS pg_name, descr AS pg_desc, list_sort(ranks) AS members"
        " FROM (SELECT unnest($names::VARCHAR[]) AS name, unnest($descs::VARCHAR[]) AS descr,"
        "              unnest($ranks::BIGINT[][]) AS ranks)",
        {
            "by_name": by_name,
            "names": names,
            "descs": [g.desc for g in manifest.groups],
            "ranks": [list(g.ranks) for g in manifest.groups],
        },
    )
    return by_name


def analyze_connection(
    connection: duckdb.DuckDBPyConnection, incident: Incident, manifest: Manifest | None = None
) -> Analysis:
    """Analyse ``incident`` in a connection whose ``src`` view holds canonical rows.

    ``manifest`` (the incident's ``_incident.json``) saves re-deriving group membership
    from every row and names ranks whose dump held no entry.
    """
    by_name = _create_groups(connection, incident, manifest)
    # the manifest lists every rank with a dump, those without entries included
    empty = list(manifest.ranks) if manifest else []
    params = {
        "job": incident.job,
        "incident": incident.incident,
        "gid_by_name": by_name,
        "empty_ranks": empty,
    }
    for name in sql_files():
        run_file(connection, name, params)

    groups = _groups(connection)
    dumped = {r for (r,) in connection.execute("SELECT rank FROM dumped").fetchall()}
    started = connection.execute("SELECT bool_or(any_started) FROM dumped").fetchone()
    timing_known = bool(started and started[0])
    expected: set[int] = set()
    world_size = None
    for group in groups.values():
        expected.update(group.ranks or ())
        if group.desc == "default_pg" and group.ranks:
            world_size = len(group.ranks)
    if world_size is None and expected:
        world_size = max(expected) + 1
    heads = waits.load_heads(connection)
    graph = waits.WaitGraph.build(connection, heads, groups, dumped)

    findings: list[Finding] = []
    for view in divergence.load_group_views(connection, groups):
        findings.extend(divergence.classify(view))
    findings = _merge_same_slot(findings, rules.shape_rule_findings(connection, groups))
    findings = _merge_same_slot(findings, rules.all_to_all_findings(connection, groups))
    findings.extend(waits.cross_pg_deadlocks(connection, graph, groups))
    findings.extend(waits.p2p_unmatched(connection, groups))
    by_slot = {(f.group.key, f.collective_seq_id): f for f in findings}
    for stuck in waits.stuck_in_flight(connection, heads, groups, dumped, timing_known):
        # a collective that never completed because its sizes were wrong is one finding
        known = by_slot.get((stuck.group.key, stuck.collective_seq_id))
        if known is None:
            findings.append(stuck)
        else:
            known.evidence["never_completed"] = stuck.evidence
    _add_where_blocked(findings, heads, groups)
    ordered, root = rootcause.rank_findings(connection, findings, graph)
    _resolve_frames(connection, incident, ordered)
    for finding in ordered:
        # their sentences quote sizes and dtypes, known only now
        if "majority" in finding.evidence and "culprits" in finding.evidence:
            finding.summary = divergence.summarize(finding)
    return Analysis(
        job=incident.job,
        incident=incident.incident,
        world_size=world_size,
        ranks=sorted(dumped),
        missing_dumps=sorted(expected - dumped),
        findings=ordered,
        root_cause=root,
    )


def analyze(path: str | Path, *, job: str | None = None, incident: str | None = None) -> Analysis:
    """Analyse an archive, or dumps imported on the fly (see ``open_source``)."""
    with open_source(path, job=job, incident=incident) as source:
        analysis = analyze_connection(source.connection, source.incident, source.manifest)
        analysis.input_problems = [
            {"path": p.path, "problem": p.problem, "detail": p.detail}
            for p in source.import_problems
        ]
        return analysis
