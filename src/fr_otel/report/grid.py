"""The cross-rank grid as a relation: rows (rank x group), columns (schedule positions),
cells (one Flight Recorder entry each), and what cells refer to (signatures, stacks).

Columns are keyed by the group's *description* and its sequence number, not by the
group itself: the 512 tensor-parallel groups of a 1,024-rank job all run the same
schedule, so ``mesh_tp #41`` is one column with one cell per rank. A rank that skipped a
collective has its later entries one column to the left of its peers', which is what
makes a desync visible as a broken column. Point-to-point entries carry the collective
sequence number current when they were issued; they get columns of their own after it.

Built on the relations of the analysis session (``entries``, ``groups``,
``dumped_ranks``: ``analysis.session``), in the session's connection.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import duckdb

from fr_otel.analysis.findings import Analysis, Finding
from fr_otel.analysis.session import Session
from fr_otel.analysis.source import Incident
from fr_otel.otel import model
from fr_otel.report.defaults import DEFAULT_COLUMNS, DEFAULT_MAX_RANKS
from fr_otel.stacks import call_site, trimmed

STATES = ("completed", "started", "scheduled")
"""Cell states by code: completed, in flight and seen started, in flight and not started."""

_CELLS_SQL = """
CREATE OR REPLACE TEMP TABLE grid_cells AS
SELECT e.rank, e.record_id, e.group_id AS gid, coalesce(g.description, g.name) AS group_desc,
       e.is_p2p AS p2p, coalesce(e.collective_seq, -1) AS seq,
       (row_number() OVER (PARTITION BY e.rank, e.group_id, e.is_p2p, e.collective_seq
                           ORDER BY e.record_id) - 1)::INTEGER AS sub,
       e.time_created_ns,
       CASE WHEN e.done THEN 0 WHEN e.started THEN 1 ELSE 2 END AS state
FROM {entries} e JOIN {groups} g USING (group_id)
"""

_COLUMNS_SQL = """
SELECT group_desc, p2p, seq, sub, median(time_created_ns)::BIGINT AS t
FROM grid_cells
GROUP BY ALL
ORDER BY group_desc, seq, p2p, sub
"""

# One join with the archive for the shown cells only; what the page needs of them is then
# read from this table (reading sizes and stacks is what costs: they are lists)
_WINDOW_ENTRIES_SQL = """
CREATE OR REPLACE TEMP TABLE grid_entries AS
SELECT c.rank, c.gid, w.col, c.state, c.record_id, c.time_created_ns,
       coalesce(s.time_completed_ns, s.time_started_ns) AS time_done_ns,
       hash(s.op, s.input_sizes, s.output_sizes, s.input_dtypes, s.output_dtypes) AS sig,
       hash(s.frames) AS stack,
       s.op, s.backend, s.input_sizes, s.output_sizes, s.input_dtypes, s.output_dtypes, s.frames,
       s.pg_name, CASE WHEN $with_ranks THEN s.pg_ranks END AS pg_ranks, s.collective_seq_id,
       s.p2p_seq_id, entry_p2p(s.is_p2p, s.op) AS is_p2p, s.run_id
FROM grid_cells c
JOIN grid_window w USING (group_desc, p2p, seq, sub)
JOIN src s ON s.rank = c.rank AND s.record_id = c.record_id
WHERE s.job = $job AND s.incident = $incident AND s.record_id >= $first_record
"""

_CELL_VALUES_SQL = """
SELECT rank, gid, col, state, record_id, time_created_ns, time_done_ns,
       (dense_rank() OVER (ORDER BY sig) - 1)::INTEGER AS sig_index,
       (dense_rank() OVER (ORDER BY stack) - 1)::INTEGER AS stack_index
FROM grid_entries
"""

_SIGNATURES_SQL = """
SELECT DISTINCT ON (sig) (dense_rank() OVER (ORDER BY sig) - 1)::INTEGER,
       op, backend, input_sizes, output_sizes, input_dtypes, output_dtypes
FROM grid_entries
"""

_STACKS_SQL = """
SELECT DISTINCT ON (stack) (dense_rank() OVER (ORDER BY stack) - 1)::INTEGER, frames
FROM grid_entries
"""

_TRACE_GROUPS_SQL = """
CREATE OR REPLACE TEMP TABLE grid_trace_groups AS
SELECT pg_name, pg_ranks, run_id, (row_number() OVER () - 1)::INTEGER AS trace_group
FROM (SELECT DISTINCT pg_name, pg_ranks, run_id FROM grid_entries)
"""

_TRACE_KEYS_SQL = """
SELECT e.rank, e.record_id, t.trace_group, e.collective_seq_id, e.p2p_seq_id, e.is_p2p
FROM grid_entries e
JOIN grid_trace_groups t
  ON e.pg_name = t.pg_name AND e.pg_ranks IS NOT DISTINCT FROM t.pg_ranks
 AND e.run_id IS NOT DISTINCT FROM t.run_id
"""


@dataclass(frozen=True, kw_only=True, slots=True)
class Column:
    """One schedule position: a group description's collective ``seq`` (or the ``sub``-th
    point-to-point op a rank issued after it)."""

    group_desc: str
    p2p: bool
    seq: int
    sub: int
    time_ns: int | None
    """The median of its entries' creation times (orders columns across groups)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """One (rank, group): the rank's entries in that group."""

    rank: int
    group: int
    """Index into ``Grid.groups``."""
    dumped: bool
    """False when the rank's dump is missing: its cells are unknown, not absent."""
    first_seq: int | None
    """The oldest collective its buffer still holds in this group (older ones wrapped away)."""
    last_seq: int | None


@dataclass(kw_only=True)
class Grid:
    """The grid as parallel lists (one entry per cell), ready to serialise."""

    groups: list[dict[str, Any]]
    rows: list[Row]
    columns: list[Column]
    columns_total: int
    """Schedule positions in the data; ``columns`` holds the window shown."""
    columns_total_by_desc: dict[str, int] = field(default_factory=dict)
    """``columns_total`` per group description (what each per-group view counts)."""
    cells: dict[str, list[Any]]
    """row, col, state, record, created_ns, done_ns, sig, stack, trace, span."""
    signatures: list[dict[str, Any]]
    stacks: list[dict[str, Any]]
    traces: list[str] = field(default_factory=list)
    """Hex trace ids, referenced by ``cells["trace"]``; empty when not asked for."""
    ranks_total: int = 0
    """Ranks in the incident (members of its groups, or with a dump)."""
    rank_step: int | None = None
    """When not every rank is shown: every ``rank_step``-th is, besides those the findings
    name."""
    findings: list[dict[str, Any]] = field(default_factory=list)
    """Per finding of the analysis, where it shows: ``col`` (its collective's column, or
    None), ``rows`` (its culprits' rows in its group, or in its replicas), ``marks``
    ([row, col] pairs of the cells it is about, entries or the gaps where they are
    missing), and ``waiting_rows`` / ``waiting_marks``, the same for its waiting ranks (not
    at fault: drawn in a style of their own, never as culprits)."""


def _ordered_columns(rows: list[tuple[Any, ...]]) -> list[Column]:
    """Each description's columns in schedule order, merged across descriptions by time
    (a merge keeps each description's own order even where clocks disagree)."""
    by_desc: dict[str, list[Column]] = {}
    for desc, p2p, seq, sub, t in rows:
        by_desc.setdefault(desc, []).append(
            Column(group_desc=desc, p2p=bool(p2p), seq=int(seq), sub=int(sub), time_ns=t)
        )
    lists = []
    for columns in by_desc.values():
        # a column whose entries have no time sorts with the one before it
        last = 0
        keyed = []
        for column in columns:
            last = column.time_ns if column.time_ns is not None else last
            keyed.append((last, column))
        lists.append(keyed)
    return [column for _, column in heapq.merge(*lists, key=lambda pair: pair[0])]


def _window(columns: list[Column], limit: int, focus: int | None) -> tuple[int, int]:
    """The last ``limit`` columns, moved back to keep ``focus`` in view (a quarter of the
    window after it, to show what followed)."""
    end = len(columns)
    if end <= limit:
        return 0, end
    start = end - limit
    if focus is not None and focus < start:
        start = max(0, focus - (limit * 3) // 4)
        end = start + limit
    return start, end


def _sample_ranks(ranks: list[int], analysis: Analysis, limit: int) -> tuple[list[int], int | None]:
    """At most ``limit`` of ``ranks``: those the findings name first (culprits, the rank
    left waiting, the majority's example; then waiting ranks, up to half the room left),
    then every n-th. Returns them and n (None when every rank fits)."""
    if len(ranks) <= limit:
        return ranks, None
    present = set(ranks)
    named: set[int] = set()
    waiting: set[int] = set()
    for finding in analysis.findings:
        named.update(finding.culprit_ranks)
        waiting.update(finding.waiting_ranks)
        left = finding.facts.left_waiting
        for value in (left[0] if left else None, finding.stacks.majority_rank):
            if value is not None:
                named.add(value)
    keep = sorted(named & present)[:limit]
    extra = sorted((waiting & present) - set(keep))
    keep += extra[: (limit - len(keep)) // 2]
    room = limit - len(keep)
    step = -(-len(ranks) // room) if room > 0 else len(ranks)
    sample = ranks[::step][:room] if room > 0 else []
    return sorted(set(keep) | set(sample)), step


def _collective_columns(columns: list[Column]) -> dict[tuple[str, int], int]:
    """(group description, seq) -> index, for the collectives' own columns."""
    return {(c.group_desc, c.seq): i for i, c in enumerate(columns) if not c.p2p and c.sub == 0}


def _collective_column(index: dict[tuple[str, int], int], finding: Finding) -> int | None:
    """The column of ``finding``'s collective, when it names one and it is there."""
    if finding.collective_seq_id is None:
        return None
    return index.get((finding.group.desc or finding.group.name, finding.collective_seq_id))


def _focus(analysis: Analysis) -> Finding | None:
    if analysis.root_cause is None or not analysis.findings:
        return None
    return analysis.findings[analysis.root_cause]


def build_grid(
    session: Session,
    *,
    columns: int = DEFAULT_COLUMNS,
    max_ranks: int = DEFAULT_MAX_RANKS,
    trace_ids: bool = False,
    span_ids: bool = False,
) -> Grid:
    """The grid of the session's incident, with its analysis.

    ``trace_ids``/``span_ids``: also give each cell the OTLP ids ``fr-otel export`` and the
    recorder use for its entry, for links to a trace viewer.
    """
    if columns < 1 or max_ranks < 1:
        raise ValueError("columns and max_ranks must be at least 1")
    analysis, incident, connection = session.analysis, session.incident, session.connection
    groups_view, dumped = session.view("groups"), session.view("dumped_ranks")
    connection.execute(_CELLS_SQL.format(entries=session.view("entries"), groups=groups_view))
    ordered = _ordered_columns(connection.execute(_COLUMNS_SQL).fetchall())
    every_rank = [
        rank
        for (rank,) in connection.execute(
            f"SELECT DISTINCT rank FROM (SELECT unnest(members) AS rank FROM {groups_view}"
            f" UNION SELECT rank FROM {dumped}) ORDER BY rank"
        ).fetchall()
    ]
    shown_ranks, rank_step = _sample_ranks(every_rank, analysis, max_ranks)
    connection.execute(
        "CREATE OR REPLACE TEMP TABLE grid_ranks AS SELECT unnest($ranks::BIGINT[]) AS rank",
        {"ranks": shown_ranks},
    )
    if rank_step is not None:
        connection.execute("DELETE FROM grid_cells WHERE rank NOT IN (SELECT rank FROM grid_ranks)")
    root = _focus(analysis)
    focus_index = (
        _collective_column(_collective_columns(ordered), root) if root is not None else None
    )
    start, end = _window(ordered, columns, focus_index)
    shown = ordered[start:end]
    connection.execute(
        "CREATE OR REPLACE TEMP TABLE grid_window AS SELECT * FROM (SELECT"
        " unnest($descs::VARCHAR[]) AS group_desc, unnest($p2p::BOOLEAN[]) AS p2p,"
        " unnest($seqs::BIGINT[]) AS seq, unnest($subs::INTEGER[]) AS sub,"
        " unnest($cols::INTEGER[]) AS col)",
        {
            "descs": [c.group_desc for c in shown],
            "p2p": [c.p2p for c in shown],
            "seqs": [c.seq for c in shown],
            "subs": [c.sub for c in shown],
            "cols": list(range(len(shown))),
        },
    )
    first = connection.execute(
        "SELECT coalesce(min(record_id), 0) FROM grid_cells JOIN grid_window"
        " USING (group_desc, p2p, seq, sub)"
    ).fetchone()
    connection.execute(
        _WINDOW_ENTRIES_SQL,
        {
            "job": incident.job,
            "incident": incident.incident,
            "first_record": int(first[0]) if first else 0,
            "with_ranks": trace_ids or span_ids,
        },
    )
    groups, group_index = _groups(connection, groups_view)
    rows, row_index = _rows(connection, group_index, groups_view, dumped)
    cells = _cells(connection, row_index)
    if trace_ids or span_ids:
        traces = _add_otlp_ids(
            connection, incident, rows, cells, trace_ids=trace_ids, span_ids=span_ids
        )
    else:
        traces = []
    signatures = [
        {
            "op": op,
            "backend": backend,
            "input_sizes": ins,
            "output_sizes": outs,
            "input_dtypes": in_dtypes,
            "output_dtypes": out_dtypes,
        }
        for _, op, backend, ins, outs, in_dtypes, out_dtypes in sorted(
            connection.execute(_SIGNATURES_SQL).fetchall()
        )
    ]
    stacks = [
        {"site": call_site(frames), "frames": trimmed(frames)}
        for _, frames in sorted(connection.execute(_STACKS_SQL).fetchall(), key=lambda r: r[0])
    ]
    return Grid(
        groups=groups,
        rows=rows,
        columns=shown,
        columns_total=len(ordered),
        columns_total_by_desc=dict(Counter(c.group_desc for c in ordered)),
        cells=cells,
        signatures=signatures,
        stacks=stacks,
        traces=traces,
        ranks_total=len(every_rank),
        rank_step=rank_step,
        findings=_locate_findings(connection, analysis, groups, rows, shown),
    )


def _groups(
    connection: duckdb.DuckDBPyConnection, groups_view: str
) -> tuple[list[dict[str, Any]], dict[int, int]]:
    found = connection.execute(
        "SELECT group_id, name, coalesce(description, name), len(members), members"
        f" FROM {groups_view} ORDER BY coalesce(description, name), len(members) DESC, name"
    ).fetchall()
    groups: list[dict[str, Any]] = []
    index: dict[int, int] = {}
    for gid, name, desc, size, members in found:
        index[gid] = len(groups)
        groups.append(
            {
                "name": name,
                "desc": desc,
                "size": size or 0,
                # a 100,000-rank default group's member list says nothing a count does not
                "ranks": list(members) if members is not None and len(members) <= 64 else None,
            }
        )
    return groups, index


def _rows(
    connection: duckdb.DuckDBPyConnection,
    group_index: dict[int, int],
    groups_view: str,
    dumped: str,
) -> tuple[list[Row], dict[tuple[int, int], int]]:
    """Every member of every group, dumped or not, by rank then group."""
    found = connection.execute(
        "WITH members AS (SELECT * FROM (SELECT DISTINCT unnest(members) AS rank,"
        f"                 group_id AS gid FROM {groups_view})"
        "                 WHERE rank IN (SELECT rank FROM grid_ranks)),"
        " spans AS (SELECT rank, gid, min(seq) AS first_seq, max(seq) AS last_seq"
        "           FROM grid_cells WHERE NOT p2p GROUP BY ALL),"
        " present AS (SELECT DISTINCT rank, gid FROM grid_cells)"
        f" SELECT m.rank, m.gid, m.rank IN (SELECT rank FROM {dumped}), s.first_seq, s.last_seq"
        " FROM (SELECT * FROM members UNION SELECT * FROM present) m"
        " LEFT JOIN spans s USING (rank, gid)"
    ).fetchall()
    keyed = sorted(
        (
            (rank, group_index[gid], gid, dumped, first, last)
            for rank, gid, dumped, first, last in found
            if gid in group_index
        ),
    )
    rows: list[Row] = []
    index: dict[tuple[int, int], int] = {}
    for rank, group, gid, dumped, first, last in keyed:
        index[(rank, gid)] = len(rows)
        rows.append(
            Row(rank=rank, group=group, dumped=bool(dumped), first_seq=first, last_seq=last)
        )
    return rows, index


def _cells(
    connection: duckdb.DuckDBPyConnection, row_index: dict[tuple[int, int], int]
) -> dict[str, list[Any]]:
    """The shown cells as parallel lists, by row then column."""
    names = ("row", "col", "state", "record", "created_ns", "done_ns", "sig", "stack")
    cells: dict[str, list[Any]] = {name: [] for name in names}
    found = connection.execute(_CELL_VALUES_SQL).fetchall()
    keyed = [(row_index[(r[0], r[1])], *r[2:]) for r in found if (r[0], r[1]) in row_index]
    keyed.sort(key=lambda r: (r[0], r[1]))
    if keyed:
        for name, values in zip(names, zip(*keyed, strict=True), strict=True):
            cells[name] = list(values)
    return cells


def _add_otlp_ids(
    connection: duckdb.DuckDBPyConnection,
    incident: Incident,
    rows: list[Row],
    cells: dict[str, list[Any]],
    *,
    trace_ids: bool,
    span_ids: bool,
) -> list[str]:
    """Give each cell the trace (and span) id its entry has as a span (``otel.model``);
    return the distinct trace ids, which ``cells["trace"]`` indexes."""
    connection.execute(_TRACE_GROUPS_SQL)
    prefixes = {
        # the run id is part of the trace id the recorder's spans have (otel.model)
        index: model.group_key(job=incident.job, pg_name=pg_name, pg_ranks=pg_ranks, run_id=run)
        for pg_name, pg_ranks, run, index in connection.execute(
            "SELECT * FROM grid_trace_groups"
        ).fetchall()
    }
    ids: dict[tuple[int, int], tuple[str, str]] = {}
    for rank, record, trace_group, seq, p2p_seq, is_p2p in connection.execute(
        _TRACE_KEYS_SQL
    ).fetchall():
        key = model.trace_key_in_group(
            prefixes[trace_group],
            collective_seq_id=seq,
            is_p2p=bool(is_p2p),
            rank=rank,
            p2p_seq_id=p2p_seq,
        )
        span = model.span_id(key, rank, record).hex() if span_ids else ""
        ids[(rank, record)] = (model.trace_id(key).hex(), span)
    traces: list[str] = []
    trace_index: dict[str, int] = {}
    if trace_ids:
        cells["trace"] = []
    if span_ids:
        cells["span"] = []
    for row, record in zip(cells["row"], cells["record"], strict=True):
        trace, span = ids[(rows[row].rank, record)]
        if trace_ids:
            if trace not in trace_index:
                trace_index[trace] = len(traces)
                traces.append(trace)
            cells["trace"].append(trace_index[trace])
        if span_ids:
            cells["span"].append(span)
    return traces


def _finding_groups(finding: Finding) -> list[str]:
    """The names of the groups a finding is about: its own, then its replicas' (one
    finding for the same fault in replicas of one group, ``evidence.replicas``)."""
    return list(dict.fromkeys(group.name for group in finding.replica_groups()))


def _locate_findings(
    connection: duckdb.DuckDBPyConnection,
    analysis: Analysis,
    groups: list[dict[str, Any]],
    rows: list[Row],
    shown: list[Column],
) -> list[dict[str, Any]]:
    """Where each finding is in the grid (see ``Grid.findings``)."""
    column_of = _collective_columns(shown)
    row_of = {(row.rank, groups[row.group]["name"]): i for i, row in enumerate(rows)}
    located = []
    for finding in analysis.findings:
        name = finding.group.name
        names = _finding_groups(finding)

        def rows_of(ranks: list[int], names: list[str] = names) -> list[int]:
            # each rank's row in the first of the finding's groups it is a member of
            found = (next((row_of[(r, n)] for n in names if (r, n) in row_of), None) for r in ranks)
            return [row for row in found if row is not None]

        col = _collective_column(column_of, finding)
        culprit_rows = rows_of(sorted(finding.culprit_ranks))
        waiting_rows = rows_of(sorted(set(finding.waiting_ranks) - set(finding.culprit_ranks)))
        marks = [[row, col] for row in culprit_rows] if col is not None else []
        waiting_marks = [[row, col] for row in waiting_rows] if col is not None else []
        waiting, p2p_seq = finding.facts.left_waiting or (None, None)
        if finding.kind == "p2p_unmatched" and waiting is not None and p2p_seq is not None:
            # the send or recv left waiting: its own column, on the waiting rank's row
            found = connection.execute(
                "SELECT col FROM grid_entries WHERE rank = ? AND pg_name = ? AND p2p_seq_id = ?"
                " AND is_p2p ORDER BY record_id DESC LIMIT 1",
                [waiting, name, p2p_seq],
            ).fetchone()
            if found is not None and (waiting, name) in row_of:
                col = int(found[0])
                marks.append([row_of[(waiting, name)], col])
        located.append(
            {
                "col": col,
                "rows": culprit_rows,
                "marks": marks,
                "waiting_rows": waiting_rows,
                "waiting_marks": waiting_marks,
            }
        )
    return located
