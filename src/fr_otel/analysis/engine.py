"""One incident in, an ``Analysis`` out: the SQL passes, then the finding passes."""

from __future__ import annotations

from pathlib import Path

import duckdb

from fr_otel.analysis import divergence, members, rootcause, rules, snapshots, stragglers, waits
from fr_otel.analysis.findings import Analysis, Finding, FrameRef, GroupRef
from fr_otel.analysis.source import Incident, open_source
from fr_otel.analysis.sqlfiles import CONSTANTS, run_file, sql_files
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
        for rank in sorted(finding.absent_ranks or finding.culprit_ranks):
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
       list_sort(any_value(pg_ranks)) AS members,
       bool_or(coalesce(pg_ranks_inferred, false)) AS inferred
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
        "        name AS pg_name, descr AS pg_desc, list_sort(ranks) AS members,"
        "        inferred"
        " FROM (SELECT unnest($names::VARCHAR[]) AS name, unnest($descs::VARCHAR[]) AS descr,"
        "              unnest($ranks::BIGINT[][]) AS ranks,"
        "              unnest($inferred::BOOLEAN[]) AS inferred)",
        {
            "by_name": by_name,
            "names": names,
            "descs": [g.desc for g in manifest.groups],
            "ranks": [list(g.ranks) for g in manifest.groups],
            "inferred": [g.inferred for g in manifest.groups],
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
    params = {"job": incident.job, "incident": incident.incident, "gid_by_name": by_name}
    first, *rest = sql_files()
    run_file(connection, first, params)
    members.complete_groups(connection, {**CONSTANTS, **params})
    reading = None
    if snapshots.is_snapshot(incident.incident, manifest):
        reading = snapshots.read_snapshot(connection)
    for name in rest:
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
    # global ranks run from 0 to the world size - 1: a lower rank without entries is
    # missing too, and so is one the manifest lists with a dump that held none
    seen = expected | dumped | set(manifest.ranks if manifest else ())
    expected |= set(range(max(seen, default=-1) + 1))
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
            by_slot[(stuck.group.key, stuck.collective_seq_id)] = stuck
        else:
            known.evidence["never_completed"] = stuck.evidence
    for silent in waits.silent_ranks(graph, groups, timing_known):
        # a rank whose GPU never started it is the culprit, whoever else is silent
        if silent.collective_seq_id is None or (
            (silent.group.key, silent.collective_seq_id) not in by_slot
        ):
            findings.append(silent)
    missing = sorted(expected - dumped)
    if not findings and missing and groups:
        # a broken incident is never healthy: say what is unknown
        default = next((g for g in groups.values() if g.desc == "default_pg"), None)
        group = default or min(groups.values(), key=lambda g: (g.name, g.key))
        findings.append(waits.unexplained_silence(missing, group))
    _unsure_stops(connection, findings)
    _add_where_blocked(findings, heads, groups)
    ordered, root = rootcause.rank_findings(connection, findings, graph)
    # performance findings come after the hang's, outside its root cause and wavefront
    stragglers.create_arrival(connection)
    ordered.extend(stragglers.stragglers(connection, groups))
    _resolve_frames(connection, incident, ordered)
    for finding in ordered:
        # their sentences quote sizes and dtypes, known only now, and name the ranks
        # that wait behind another finding
        _resummarize(finding)
    return Analysis(
        job=incident.job,
        incident=incident.incident,
        world_size=world_size,
        ranks=sorted(dumped),
        missing_dumps=missing,
        findings=ordered,
        root_cause=root,
        snapshot=reading.to_dict() if reading is not None else None,
    )


def _unsure_stops(connection: duckdb.DuckDBPyConnection, findings: list[Finding]) -> None:
    """A missing rank whose last collective is a retired gloo one in a group with a silent
    member may have stopped after it, or may wait in it on the silent member: the
    evidence that would blame it is the silent member's. Name both, blame neither."""
    unsure = {
        rank: (gid, seq, op, list(silent))
        for rank, gid, seq, op, silent in connection.execute(
            "SELECT rank, gid, seq, op, silent FROM unsure_stops"
        ).fetchall()
    }
    groups = {f.group.key: f.group for f in findings}
    stopped_or_waiting: dict[int, str] = {}
    for finding in findings:
        if finding.kind != "missing_rank" or not finding.culprit_ranks:
            continue
        if not all(r in unsure for r in finding.culprit_ranks):
            continue
        candidates = sorted(
            {*finding.culprit_ranks, *(s for r in finding.culprit_ranks for s in unsure[r][3])}
        )
        reasons = []
        for rank in finding.culprit_ranks:
            gid, seq, op, silent = unsure[rank]
            group = groups.get(gid)
            label = group.label() if group else "its group"
            silent_words = ", ".join(map(str, silent))
            reasons.append(
                f"rank {rank}'s last collective, {op} {label} #{seq}, shows retired, which gloo"
                f" shows for a failed collective too: rank {rank} stopped after it, or waits"
                f" in it on rank {silent_words}, which left no dump"
            )
        finding.evidence["ambiguous"] = True
        finding.evidence["candidate_ranks"] = candidates
        finding.evidence["reason"] = "; ".join(reasons)
        finding.culprit_ranks = []
        stopped_or_waiting.update({r: finding.evidence["reason"] for r in finding.absent_ranks})
    for finding in findings:
        # the same doubt, seen from the silent member's side: the rank that waits on it
        # may instead have stopped after a collective that completed
        if finding.kind != "silent_rank":
            continue
        doubtful = sorted(set(finding.evidence.get("present_ranks", ())) & set(stopped_or_waiting))
        if not doubtful or not finding.evidence.get("retired_in_dumps"):
            continue
        finding.evidence["ambiguous"] = True
        finding.evidence["candidate_ranks"] = sorted({*finding.culprit_ranks, *doubtful})
        finding.evidence["reason"] = stopped_or_waiting[doubtful[0]]
        finding.culprit_ranks = []


def _resummarize(finding: Finding) -> None:
    if finding.kind == "silent_rank":
        finding.summary = waits.silent_summary(finding)
    elif finding.evidence.get("ambiguous") and finding.kind == "cross_pg_deadlock":
        return
    elif "majority" in finding.evidence and "culprits" in finding.evidence:
        finding.summary = divergence.summarize(finding)
    elif finding.kind == "p2p_unmatched":
        finding.summary = waits.p2p_summary(finding)
    elif finding.waiting_ranks:
        ranks = ", ".join(map(str, finding.waiting_ranks))
        plural = len(finding.waiting_ranks) > 1
        finding.summary += (
            f"; rank{'s' if plural else ''} {ranks} {'wait' if plural else 'waits'} behind"
            f" [{finding.consequence_of}], not at fault"
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
