"""Group memberships the dumps lack (gloo's): inferred across an incident's ranks
(``dumps.membership``) and written into its staged files; the ranks without a dump."""

from __future__ import annotations

import pyarrow as pa

from fr_otel.archive.duplicate_ranks import RankKey
from fr_otel.archive.import_report import ImportReport
from fr_otel.archive.layout import discard_staged, read_staged, write_staged
from fr_otel.archive.stage_dump import Outcome
from fr_otel.dumps.membership import apply_memberships, expected_ranks, resolve_memberships
from fr_otel.schema import RECORD_SCHEMA


def fill_memberships(kept: dict[RankKey, Outcome], report: ImportReport) -> None:
    incidents = sorted({(job, incident) for job, incident, _ in kept})
    for job, incident in incidents:
        members = {rank: o for (j, inc, rank), o in kept.items() if (j, inc) == (job, incident)}
        memberships = resolve_memberships({rank: o.groups for rank, o in members.items()})
        report.memberships[(job, incident)] = memberships
        for outcome in members.values():
            if outcome.incomplete_membership and outcome.staged is not None:
                table = read_staged(outcome.staged)
                in_file = outcome.task.members_in_file
                if not in_file:
                    table = _with_members(table, {n: g.ranks for n, g in outcome.groups.items()})
                table = apply_memberships(table, memberships)
                if not in_file:
                    outcome.members = dict(
                        zip(
                            table.column("pg_name").to_pylist(),
                            table.column("pg_ranks").to_pylist(),
                            strict=True,
                        )
                    )
                    table = table.drop_columns(["pg_ranks"])
                restaged = write_staged(table, outcome.task.final, outcome.task.owner)
                discard_staged(outcome.staged)
                outcome.staged = restaged
        # a dump without entries is a rank whose buffer is missing
        empty = {rank for rank, outcome in members.items() if outcome.rows == 0}
        expected = expected_ranks(memberships) | empty
        report.missing_ranks.extend(sorted(expected - (set(members) - empty)))
        report.groups += len(memberships)


def _with_members(table: pa.Table, members: dict[str, list[int] | None]) -> pa.Table:
    """``table`` (written without ``pg_ranks``) with the column put back, by group name."""
    field_ = RECORD_SCHEMA.field("pg_ranks")
    column = pa.array([members.get(n) for n in table.column("pg_name").to_pylist()], field_.type)
    return table.add_column(RECORD_SCHEMA.get_field_index("pg_ranks"), field_, column)
