"""One incident in, an ``Analysis`` out: the SQL passes, then the finding passes."""

from __future__ import annotations

from pathlib import Path

import duckdb

from fr_otel.analysis import (
    divergence,
    members,
    prepared,
    rootcause,
    rules,
    slots,
    snapshots,
    stragglers,
    waits,
)
from fr_otel.analysis.divergence_evidence import SlotEvidence
from fr_otel.analysis.findings import Analysis, Finding, GroupRef, rank_list, resolve_entries
from fr_otel.analysis.source import Incident, rows_of_ranks
from fr_otel.analysis.sqlfiles import CONSTANTS, group_key, rendered, run_file, sql_files
from fr_otel.analysis.waits import P2PEvidence, SilentEvidence
from fr_otel.archive.manifest import Manifest


def _groups(connection: duckdb.DuckDBPyConnection) -> dict[int, GroupRef]:
    return {
        gid: GroupRef(name=name, desc=desc, ranks=tuple(members or ()), key=gid)
        for gid, name, desc, members in connection.execute(
            "SELECT gid, pg_name, pg_desc, members FROM groups"
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
        elif twin.facts.rule is None:
            twin.facts.rule = finding.facts
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
            if isinstance(finding.facts, SlotEvidence | P2PEvidence):
                finding.facts.blocked(rank, where)


def _create_groups(
    connection: duckdb.DuckDBPyConnection, incident: Incident, manifest: Manifest | None
) -> bool:
    """The ``groups`` table; returns whether group names alone identify groups."""
    if manifest is None:
        params = {"job": incident.job, "incident": incident.incident}
        run_file(connection, "groups_from_rows.sql", params, {"gid": group_key(False)})
        return False
    names = [g.name for g in manifest.groups]
    by_name = len(names) == len(set(names))
    run_file(
        connection,
        "groups_from_manifest.sql",
        {
            "names": names,
            "descs": [g.desc for g in manifest.groups],
            "ranks": [list(g.ranks) for g in manifest.groups],
            "inferred": [g.inferred for g in manifest.groups],
        },
        {"gid": group_key(by_name)},
    )
    return by_name


def _first_pass(
    connection: duckdb.DuckDBPyConnection,
    first: str,
    params: dict[str, str],
    text: dict[str, str],
    entries_folder: Path | None,
    *,
    keep: bool = False,
) -> None:
    """The first pass's ``e`` (``first``, the first of ``sql_files``): loaded from the
    incident's prepared entries in ``entries_folder`` where they are current, else made
    (and, with ``keep``, kept there: ``prepared.save``'s errors are raised)."""
    kept = None
    if entries_folder is not None:
        kept = prepared.prepared_entries(
            connection, entries_folder, rendered(first, text), {**CONSTANTS, **params}
        )
    if kept is None or not prepared.load(connection, kept):
        run_file(connection, first, params, text)
        if keep and kept is not None:
            prepared.save(connection, kept)
    run_file(connection, "dumped.sql", params)


def _first_pass_text(by_name: bool) -> dict[str, str]:
    # where names identify groups, the first pass reads no member list: src_rows, whose
    # plan lacks src's subquery that fills them in (source.register_archive)
    return {"gid": group_key(by_name), "rows": "src_rows" if by_name else "src"}


def prepare_entries(
    connection: duckdb.DuckDBPyConnection,
    incident: Incident,
    manifest: Manifest | None,
    entries_folder: Path,
) -> None:
    """Make the incident's prepared entries in ``entries_folder`` unless they are current
    (``prepared``): what ``fr-otel import`` leaves, so that analyses skip the first pass.
    Raises ``OSError`` or ``duckdb.Error`` when they cannot be written."""
    by_name = _create_groups(connection, incident, manifest)
    params = {"job": incident.job, "incident": incident.incident}
    first = sql_files()[0]
    text = _first_pass_text(by_name)
    _first_pass(connection, first, params, text, entries_folder, keep=True)


def analyze_connection(
    connection: duckdb.DuckDBPyConnection,
    incident: Incident,
    manifest: Manifest | None = None,
    *,
    entries_folder: Path | None = None,
) -> Analysis:
    """Analyse ``incident`` in a connection whose ``src`` and ``src_rows`` views hold
    canonical rows (``source.register_archive``).

    ``manifest`` (the incident's ``_incident.json``) saves re-deriving group membership
    from every row and names ranks whose dump held no entry. ``entries_folder``: the
    incident's folder in an archive, whose prepared entries (``prepared``), where current,
    stand in for the first pass.
    """
    by_name = _create_groups(connection, incident, manifest)
    params = {"job": incident.job, "incident": incident.incident}
    text = _first_pass_text(by_name)
    first, *rest = sql_files()
    _first_pass(connection, first, params, text, entries_folder)
    members.complete_groups(connection, {**CONSTANTS, **params})
    reading = None
    if snapshots.is_snapshot(incident.incident, manifest):
        prepared.writable(connection)  # the reading sets entries aside
        reading = snapshots.read_snapshot(connection)
    for name in rest:
        run_file(connection, name, params, text)
        if name == _SLOTS_PASS:
            _gloo_entries(connection)

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
    for view in slots.load_group_views(connection, groups):
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
            known.facts.never_completed = stuck.facts
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
    # sizes, dtypes and stacks of the entries the findings show, read once for them all
    ordered = resolve_entries(
        connection,
        incident.job,
        incident.incident,
        ordered,
        lambda ranks: rows_of_ranks(connection, incident.job, incident.incident, ranks),
    )
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


_SLOTS_PASS = "02_slots.sql"


_GLOO_CORRECTIONS = (
    ("failed_gloo", "failed_gloo_entries.sql"),
    ("unretired_gloo", "unretired_gloo_entries.sql"),
)
"""The slots pass's corrections of gloo's retired marks, and the files that carry them
over to the entries."""


def _gloo_entries(connection: duckdb.DuckDBPyConnection) -> None:
    """Carry the slots pass's corrections to the entries: failed gloo collectives are not
    done, and completed ones gloo had not yet retired are; each only where there are
    any: only then is ``e`` copied out of the kept entries (``prepared.writable``)."""
    for table, name in _GLOO_CORRECTIONS:
        count = connection.execute(f"SELECT count(*) FROM {table}").fetchone()
        if count and count[0]:
            prepared.writable(connection)
            run_file(connection, name, {})


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
            silent_words = rank_list(silent)
            reasons.append(
                f"rank {rank}'s last collective, {op} {label} #{seq}, shows retired, which gloo"
                f" shows for a failed collective too: rank {rank} stopped after it, or waits"
                f" in it on rank {silent_words}, which left no dump"
            )
        reason = "; ".join(reasons)
        finding.facts.ambiguous = True
        finding.facts.candidate_ranks = candidates
        finding.facts.reason = reason
        finding.culprit_ranks = []
        stopped_or_waiting.update({r: reason for r in finding.absent_ranks})
    for finding in findings:
        # the same doubt, seen from the silent member's side: the rank that waits on it
        # may instead have stopped after a collective that completed
        facts = finding.facts
        if not isinstance(facts, SilentEvidence):
            continue
        doubtful = sorted(set(facts.present_ranks) & set(stopped_or_waiting))
        if not doubtful or not facts.retired_in_dumps:
            continue
        facts.ambiguous = True
        facts.candidate_ranks = sorted({*finding.culprit_ranks, *doubtful})
        facts.reason = stopped_or_waiting[doubtful[0]]
        finding.culprit_ranks = []
