"""Telling runs apart: the dumps of one planned incident that are of separate runs of a job
each get an incident of their own.

**Runs are never mixed.** Dumps of one run of a job agree on their FR format version,
their communication library version, their world size and their run id (the recorder's
``run=R`` folder, when their path has one), and their entries' times
overlap: every rank was issuing collectives until the job stopped. Dumps that fall into
separate runs by these rules (a job restarted, two runs' dumps copied into one folder)
are imported as separate incidents, ``<incident>-run1``, ``-run2``... oldest first.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from fr_otel import config
from fr_otel.archive.import_plan import default_incident, quorum_name
from fr_otel.archive.import_report import ImportReport
from fr_otel.archive.layout import (
    ImportLock,
    discard_staged,
    partition_dir,
    rank_file,
    read_staged,
    write_staged,
)
from fr_otel.archive.stage_dump import Outcome

RUN_GAP_NS = 1_000_000_000
"""Dumps whose entries' times are further apart than this (after chaining overlapping
ones) are of different runs. Ranks of one run issue collectives until it stops; hosts'
clocks agree to well within this."""


@dataclass(kw_only=True)
class _Run:
    members: list[Outcome]
    start: int
    end: int
    fr_version: str | None
    comm_lib_version: str | None = None
    world: int | None = None
    run_id: str | None = None

    @classmethod
    def of(cls, outcome: Outcome, start: int, end: int) -> _Run:
        """A run of one dump so far, from ``start`` to ``end``."""
        run = cls(members=[], start=start, end=end, fr_version=outcome.fr_version)
        run.add(outcome)
        return run

    def accepts(self, outcome: Outcome) -> bool:
        return (
            outcome.fr_version == self.fr_version
            and _agree(outcome.comm_lib_version, self.comm_lib_version)
            and _agree(outcome.world, self.world)
            and _agree(outcome.run_id, self.run_id)
        )

    def add(self, outcome: Outcome) -> None:
        self.members.append(outcome)
        if outcome.time_span is not None:
            self.start = min(self.start, outcome.time_span[0])
            self.end = max(self.end, outcome.time_span[1])
        self.comm_lib_version = self.comm_lib_version or outcome.comm_lib_version
        self.world = self.world or outcome.world
        self.run_id = self.run_id or outcome.run_id


def _agree(a: object, b: object) -> bool:
    return a is None or b is None or a == b


def split_runs(outcomes: list[Outcome]) -> list[list[Outcome]]:
    """The runs among one incident's dumps, oldest first (see the module's docstring).

    Dumps are taken in the order of their first entry; each joins a run whose versions
    and world size it agrees with and whose entries reach to within ``RUN_GAP_NS`` of its
    first, else starts a run. Dumps without timed entries join the run nearest to their
    dump time that they agree with.
    """
    timed = sorted(
        (o for o in outcomes if o.time_span is not None),
        key=lambda o: (o.time_span, str(o.task.dump.path)),
    )
    runs: list[_Run] = []
    for outcome in timed:
        assert outcome.time_span is not None
        start, end = outcome.time_span
        home = next(
            (r for r in runs if r.accepts(outcome) and start <= r.end + RUN_GAP_NS),
            None,
        )
        if home is None:
            runs.append(_Run.of(outcome, start, end))
        else:
            home.add(outcome)
    for outcome in sorted(
        (o for o in outcomes if o.time_span is None), key=lambda o: str(o.task.dump.path)
    ):
        fitting = [r for r in runs if r.accepts(outcome)] or runs
        if not fitting:
            runs.append(_Run.of(outcome, outcome.dump_time_ns, outcome.dump_time_ns))
            continue
        when = outcome.dump_time_ns
        nearest = min(
            fitting,
            key=lambda r: (
                0 if r.start <= when <= r.end else min(abs(when - r.start), abs(when - r.end))
            ),
        )
        nearest.members.append(outcome)
    runs.sort(key=lambda r: (r.start, r.end))
    return [r.members for r in runs]


def separate_runs(
    outcomes: list[Outcome],
    incident: str | None,
    locks: dict[str, ImportLock],
    report: ImportReport,
) -> None:
    """Give each run among the dumps of one planned incident an incident of its own."""
    by_base: dict[tuple[str, str], list[Outcome]] = {}
    for outcome in outcomes:
        if outcome.error is None:
            by_base.setdefault((outcome.task.job, outcome.task.base), []).append(outcome)
    for (job, base), members in sorted(by_base.items()):
        runs = split_runs(members)
        if len(runs) < 2:
            continue
        report.runs_split = True
        quorum = members[0].task.dump.quorum
        for number, run in enumerate(runs, start=1):
            if incident is not None:
                name = quorum_name(f"{incident}-run{number}", quorum)
            else:
                name = quorum_name(default_incident(o.task.dump for o in run), quorum)
            config.validate_partition_value("incident", name)
            locks[job].add([name])
            for outcome in run:
                _retarget(outcome, name)
        remove_if_empty(partition_dir(members[0].task.final.parents[2], job, base))


def _retarget(outcome: Outcome, incident: str) -> None:
    """Move a staged file to another incident (its rows name their incident)."""
    task = outcome.task
    if task.incident == incident:
        return
    archive = task.final.parents[2]
    rank = task.dump.rank if task.dump.rank is not None else -1
    task.incident = incident
    task.final = rank_file(archive, task.job, incident, rank, suffix=task.final.suffix)
    if outcome.staged is None:
        return
    table = read_staged(outcome.staged)
    column = table.schema.get_field_index("incident")
    table = table.set_column(
        column,
        table.schema.field(column),
        pa.array([incident] * table.num_rows, table.schema.field(column).type),
    )
    restaged = write_staged(table, task.final, task.owner)
    discard_staged(outcome.staged)
    outcome.staged = restaged


def remove_if_empty(folder: Path) -> None:
    """A planned incident folder all of whose dumps went to runs' incidents."""
    with contextlib.suppress(OSError):
        folder.rmdir()
