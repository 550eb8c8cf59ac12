"""Size findings that need no majority: shape rules per entry, all_to_all totals per group."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import duckdb

from fr_otel.analysis import findings as base
from fr_otel.analysis.findings import EntryRef, Finding, GroupRef, Stacks, entry_json, ranks_words
from fr_otel.analysis.sqlfiles import ALL_TO_ALL_OPS


@dataclass(frozen=True, kw_only=True, slots=True)
class RuleEntry:
    """One member's element counts at a slot, and its entry."""

    rank: int
    input_numel: int | None
    output_numel: int | None
    entry: EntryRef


@dataclass(kw_only=True)
class ShapeRuleEvidence(base.Evidence):
    """Entries that break their op's own numel rule."""

    shape_rule: str
    group_size: int
    entries: list[RuleEntry]
    everyone: bool

    def own(self, entries: base.Entries) -> dict[str, Any]:
        return {
            "rule": self.shape_rule,
            "group_size": self.group_size,
            "entries": [
                {
                    "rank": e.rank,
                    "input_numel": e.input_numel,
                    "output_numel": e.output_numel,
                    **entry_json(e.entry, entries),
                }
                for e in self.entries
            ],
        }

    def own_refs(self) -> Iterator[EntryRef]:
        for e in self.entries:
            yield e.entry

    def headline(self, finding: Finding) -> str:
        ranks = [e.rank for e in self.entries]
        who = "every member" if self.everyone else "ranks " + base.rank_list(ranks)
        rule = f"{self.shape_rule} (group size {self.group_size})"
        return f"{finding.op} {finding.place()} breaks its shape rule on {who}: {rule}"


@dataclass(kw_only=True)
class AllToAllEvidence(base.Evidence):
    """An all_to_all whose totals do not balance over the group."""

    total_input_numel: int
    total_output_numel: int
    per_rank: list[dict[str, Any]]
    """``{"rank", "input_numel", "output_numel"}`` per member with a dump."""
    blame: str
    assumed: dict[str, Any] | None = None
    """``{"ranks", "input_numel", "output_numel"}``: members without a dump, taken to have
    moved what most members with one did (their part of the totals)."""

    JSON_FIELDS = ("total_input_numel", "total_output_numel", "per_rank")

    def own(self, entries: base.Entries) -> dict[str, Any]:
        out = super().own(entries)
        if self.assumed is not None:
            out["assumed"] = self.assumed
        return out

    def headline(self, finding: Finding) -> str:
        sent, received = self.total_input_numel, self.total_output_numel
        balance = f"{sent} elements sent, {received} received"
        if self.assumed is not None:
            who = ranks_words(self.assumed["ranks"])
            balance += (
                f" if {who}, which left no dump, moved what most members did"
                f" ({self.assumed['input_numel']} in, {self.assumed['output_numel']} out)"
            )
        return f"all_to_all {finding.place()} does not balance: {balance}; {self.blame}"


def _slot_time(connection: duckdb.DuckDBPyConnection, gid: int, seq: int) -> int | None:
    row = connection.execute(
        "SELECT min(created_ns) FROM slots WHERE gid = ? AND seq = ?", [gid, seq]
    ).fetchone()
    return row[0] if row else None


def shape_rule_findings(
    connection: duckdb.DuckDBPyConnection, groups: dict[int, GroupRef]
) -> list[Finding]:
    """One finding per slot where entries break their op's own numel rule."""
    rows = connection.execute(
        "SELECT gid, seq, any_value(op), list(rank ORDER BY rank), any_value(rule),"
        " list(struct_pack(rank, record_id, in_numel, out_numel) ORDER BY rank),"
        " any_value(group_size)"
        " FROM rule_violations GROUP BY gid, seq ORDER BY gid, seq"
    ).fetchall()
    findings = []
    for gid, seq, op, ranks, rule, details, size in rows:
        group = groups[gid]
        findings.append(
            Finding(
                kind="size_mismatch",
                group=group,
                collective_seq_id=seq,
                op=op,
                culprit_ranks=list(ranks),
                facts=ShapeRuleEvidence(
                    shape_rule=rule,
                    group_size=size,
                    entries=[
                        RuleEntry(
                            rank=d["rank"],
                            input_numel=d["in_numel"],
                            output_numel=d["out_numel"],
                            entry=EntryRef(d["rank"], d["record_id"]),
                        )
                        for d in details
                    ],
                    everyone=set(ranks) >= set(group.ranks or ()),
                ),
                time_ns=_slot_time(connection, gid, seq),
                stacks=_stacks(details, list(ranks)),
            )
        )
    return findings


def _stacks(entries: list[dict[str, Any]], culprits: list[int]) -> Stacks:
    """Stack references: the culprits', and one other member's as the reference."""
    others = [e for e in entries if e["rank"] not in culprits] or entries
    return Stacks(
        culprit={
            e["rank"]: EntryRef(e["rank"], e["record_id"]) for e in entries if e["rank"] in culprits
        },
        majority=EntryRef(others[0]["rank"], others[0]["record_id"]),
        majority_rank=others[0]["rank"],
        culprit_first=True,
    )


_CHANGED = """
SELECT cur.rank
FROM e cur
JOIN LATERAL (
    SELECT p.in_numel, p.out_numel FROM e p
    WHERE p.gid = cur.gid AND p.rank = cur.rank AND p.site IS NOT DISTINCT FROM cur.site
      AND p.op = cur.op AND p.seq < cur.seq AND NOT p.p2p
    ORDER BY p.seq DESC LIMIT 1
) prev ON true
WHERE cur.gid = ? AND cur.seq = ? AND NOT cur.p2p AND list_contains(?, cur.op)
  AND (prev.in_numel <> cur.in_numel OR prev.out_numel <> cur.out_numel)
ORDER BY cur.rank
"""


def _changed_since_last_time(
    connection: duckdb.DuckDBPyConnection, gid: int, seq: int
) -> list[int]:
    rows = connection.execute(_CHANGED, [gid, seq, ALL_TO_ALL_OPS]).fetchall()
    return [rank for (rank,) in rows]


def all_to_all_findings(
    connection: duckdb.DuckDBPyConnection, groups: dict[int, GroupRef]
) -> list[Finding]:
    """all_to_all slots whose totals do not balance over the group (members without a
    dump taken to have moved what most members with one did)."""
    findings = []
    rows = connection.execute(
        "SELECT gid, seq, per_rank, total_in, total_out, silent FROM all_to_all_balance"
        " ORDER BY gid, seq"
    ).fetchall()
    for gid, seq, per_rank, total_in, total_out, silent in rows:
        group = groups[gid]
        pairs = Counter((r["i"], r["o"]) for r in per_rank)
        (usual, usual_n), *rest = pairs.most_common()
        assumed = None
        if silent:
            # what the members without a dump moved is unknown. Members with one are
            # still in it, so it may not have balanced: it does not if the silent ones
            # moved what most members with a dump did (a shape two or more share, ahead
            # of any other), and the members that moved something else are the culprits
            if usual_n < 2 or (rest and rest[0][1] == usual_n):
                continue
            total_in += len(silent) * usual[0]
            total_out += len(silent) * usual[1]
            if total_in == total_out:
                continue
            assumed = {"ranks": list(silent), "input_numel": usual[0], "output_numel": usual[1]}
        changed = _changed_since_last_time(connection, gid, seq)
        if 0 < len(changed) < len(per_rank):
            # uneven splits are legal, so shapes need not agree: the rank whose shape
            # changed since the last call at the same site is the one that broke it
            culprits = changed
            blame = (
                f"{ranks_words(culprits)} changed their split sizes since the last all_to_all"
                " at the same call site"
            )
        elif rest and rest[0][1] == usual_n:
            culprits = []
            blame = "no member's shape has a majority"
        else:
            culprits = sorted(r["rank"] for r in per_rank if (r["i"], r["o"]) != usual)
            differ = "differs" if len(culprits) == 1 else "differ"
            blame = (
                f"{ranks_words(culprits)} {differ} from the {usual_n} member(s) that sent"
                f" {usual[0]} and received {usual[1]} elements"
            )
        findings.append(
            Finding(
                kind="size_mismatch",
                group=group,
                collective_seq_id=seq,
                op="all_to_all",
                culprit_ranks=culprits,
                facts=AllToAllEvidence(
                    total_input_numel=total_in,
                    total_output_numel=total_out,
                    per_rank=[
                        {"rank": r["rank"], "input_numel": r["i"], "output_numel": r["o"]}
                        for r in per_rank
                    ],
                    blame=blame,
                    assumed=assumed,
                ),
                stacks=_stacks(per_rank, culprits),
                time_ns=_slot_time(connection, gid, seq),
            )
        )
    return findings
