"""Size findings that need no majority: shape rules per entry, all_to_all totals per group."""

from __future__ import annotations

from collections import Counter

import duckdb

from fr_otel.analysis.findings import Finding, GroupRef


def _slot_time(connection: duckdb.DuckDBPyConnection, gkey: str, seq: int) -> int | None:
    row = connection.execute(
        "SELECT min(created_ns) FROM slots WHERE gkey = ? AND seq = ?", [gkey, seq]
    ).fetchone()
    return row[0] if row else None


def shape_rule_findings(
    connection: duckdb.DuckDBPyConnection, groups: dict[str, GroupRef]
) -> list[Finding]:
    """One finding per slot where entries break their op's own numel rule."""
    rows = connection.execute(
        "SELECT gkey, seq, any_value(op), list(rank ORDER BY rank), any_value(rule),"
        " list(struct_pack(rank, input_sizes, output_sizes, in_numel, out_numel) ORDER BY rank),"
        " any_value(group_size)"
        " FROM rule_violations GROUP BY gkey, seq ORDER BY gkey, seq"
    ).fetchall()
    findings = []
    for gkey, seq, op, ranks, rule, details, size in rows:
        group = groups[gkey]
        everyone = set(ranks) >= set(group.ranks or ())
        findings.append(
            Finding(
                kind="size_mismatch",
                group=group,
                collective_seq_id=seq,
                op=op,
                culprit_ranks=list(ranks),
                summary=(
                    f"{op} {group.label()} collective #{seq} breaks its shape rule on"
                    f" {'every member' if everyone else 'ranks ' + ', '.join(map(str, ranks))}:"
                    f" {rule} (group size {size})"
                ),
                evidence={"rule": rule, "group_size": size, "entries": details},
                time_ns=_slot_time(connection, gkey, seq),
            )
        )
    return findings


_CHANGED = """
SELECT cur.rank
FROM slots cur
JOIN LATERAL (
    SELECT p.input_sizes, p.output_sizes FROM slots p
    WHERE p.gkey = cur.gkey AND p.rank = cur.rank AND p.site = cur.site AND p.seq < cur.seq
    ORDER BY p.seq DESC LIMIT 1
) prev ON true
WHERE cur.gkey = ? AND cur.seq = ?
  AND (prev.input_sizes <> cur.input_sizes OR prev.output_sizes <> cur.output_sizes)
ORDER BY cur.rank
"""


def _changed_since_last_time(connection: duckdb.DuckDBPyConnection, gkey: str, seq: int) -> list[int]:
    return [rank for (rank,) in connection.execute(_CHANGED, [gkey, seq]).fetchall()]


def all_to_all_findings(
    connection: duckdb.DuckDBPyConnection, groups: dict[str, GroupRef]
) -> list[Finding]:
    """all_to_all slots whose totals do not balance over the group."""
    findings = []
    rows = connection.execute(
        "SELECT gkey, seq, per_rank, total_in, total_out FROM all_to_all_balance ORDER BY ALL"
    ).fetchall()
    for gkey, seq, per_rank, total_in, total_out in rows:
        group = groups[gkey]
        pairs = Counter((r["i"], r["o"]) for r in per_rank)
        (usual, usual_n), *rest = pairs.most_common()
        changed = _changed_since_last_time(connection, gkey, seq)
        if changed and 2 * len(changed) < len(per_rank):
            # uneven splits are legal, so shapes need not agree: the rank whose shape
            # changed since the last call at the same site is the one that broke it
            culprits = changed
            blame = (
                f"rank{'s' if len(culprits) > 1 else ''} {', '.join(map(str, culprits))}"
                " changed their split sizes since the last all_to_all at the same call site"
            )
        elif rest and rest[0][1] == usual_n:
            culprits = []
            blame = "no member's shape has a majority"
        else:
            culprits = sorted(r["rank"] for r in per_rank if (r["i"], r["o"]) != usual)
            blame = (
                f"rank{'s' if len(culprits) > 1 else ''} {', '.join(map(str, culprits))} differ"
                f" from the {usual_n} member(s) that sent {usual[0]} and received {usual[1]}"
                " elements"
            )
        findings.append(
            Finding(
                kind="size_mismatch",
                group=group,
                collective_seq_id=seq,
                op="all_to_all",
                culprit_ranks=culprits,
                summary=(
                    f"all_to_all {group.label()} collective #{seq} does not balance: {total_in}"
                    f" elements sent, {total_out} received; {blame}"
                ),
                evidence={
                    "total_input_numel": total_in,
                    "total_output_numel": total_out,
                    "per_rank": per_rank,
                },
                time_ns=_slot_time(connection, gkey, seq),
            )
        )
    return findings
