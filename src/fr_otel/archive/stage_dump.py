"""A worker's job: one dump loaded, converted and written under a temporary name beside its
final place, with what the parent needs of it to tell runs, duplicates and groups apart."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from fr_otel.archive import footer_members, scratch
from fr_otel.archive.hosts import Placement
from fr_otel.archive.layout import write_staged
from fr_otel.dumps.discover import DumpFile
from fr_otel.dumps.load import load_dump_file
from fr_otel.dumps.membership import needs_membership
from fr_otel.dumps.parse import GroupSeen
from fr_otel.errors import ArchiveError, DumpError


@dataclass(kw_only=True, slots=True)
class Task:
    dump: DumpFile
    job: str
    incident: str
    final: Path
    owner: str | None = None
    """The import's lock token, carried by its temporary files' names."""
    base: str = ""
    """The incident before runs were told apart (with its quorum suffix: ``quorum``)."""
    members_in_file: bool = True
    """Write ``pg_ranks`` into the rank file (see ``import_dumps``)."""
    placement: Placement | None = None
    """Where the rank ran (``archive.hosts``: its file's name, or the import's map)."""


@dataclass(kw_only=True, slots=True)
class Outcome:
    task: Task
    staged: Path | None = None
    error: DumpError | None = None
    rows: int = 0
    span: tuple[int, int, int] = (0, -1, -1)
    source_format: str = ""
    groups: dict[str, GroupSeen] = field(default_factory=dict)
    incomplete_membership: bool = False
    archive_error: ArchiveError | None = None
    warnings: list[str] = field(default_factory=list)
    time_span: tuple[int, int] | None = None
    """(first, last) ``time_created_ns`` of its entries."""
    fr_version: str | None = None
    comm_lib_version: str | None = None
    world: int | None = None
    """The default group's size, when the dump's group table can be trusted (not gloo)."""
    run_id: str | None = None
    """The launch's id, when the dump's path names it (``run=R/``, the recorder's)."""
    dump_time_ns: int = 0
    members: dict[str, list[int] | None] | None = None
    """Group name -> members as its file's rows have them once memberships were inferred,
    for a file written without ``pg_ranks`` (else: ``groups``)."""
    lifted: footer_members.Runs = field(default_factory=dict)
    """The groups whose members the file keeps in its footer (``archive.footer_members``)."""
    mapped: tuple[Path, pa.Table] | None = None
    """A scratch file's rows as the parent mapped them on receiving it, with the staged
    file they are of (a file staged again later is not that file)."""


def load_and_stage(task: Task) -> Outcome:
    to_scratch = scratch.is_scratch(task.final)
    try:
        parsed = load_dump_file(
            task.dump,
            job=task.job,
            incident=task.incident,
            members_column=task.members_in_file,
            dictionary_members_above=None if to_scratch else footer_members.FOOTER_MIN_MEMBERS,
            shared=to_scratch,
        )
    except DumpError as exc:
        return Outcome(task=task, error=exc)
    table = parsed.table
    if task.placement is not None:
        table = placed(table, task.placement)
    lifted: footer_members.Runs = {}
    incomplete = needs_membership(parsed.groups)
    if "pg_ranks" in table.column_names:
        if incomplete:  # memberships are inferred into every row's list later
            table = footer_members.with_lists(table)
        else:
            table, lifted = footer_members.as_written(table)
    try:
        staged = write_staged(table, task.final, task.owner)
    except ArchiveError as exc:
        return Outcome(task=task, archive_error=exc)
    world = next(
        (len(g.ranks) for g in parsed.groups.values() if g.desc == "default_pg" and g.ranks),
        None,
    )
    comm_lib = next((v for v in table.column("comm_lib_version").unique().to_pylist() if v), None)
    run_id = (
        next((v for v in table.column("run_id").unique().to_pylist() if v), None)
        if "run_id" in table.column_names
        else None
    )
    dump_time = table.column("dump_time_ns")[0].as_py() if table.num_rows else None
    if dump_time is None:
        with contextlib.suppress(OSError):
            dump_time = task.dump.path.stat().st_mtime_ns
    return Outcome(
        task=task,
        staged=staged,
        rows=table.num_rows,
        span=parsed.record_id_span,
        source_format=parsed.source_format,
        groups=parsed.groups,
        incomplete_membership=incomplete,
        lifted=lifted,
        warnings=parsed.warnings,
        time_span=_time_span(table),
        fr_version=parsed.version,
        comm_lib_version=comm_lib,
        world=world,
        run_id=run_id,
        dump_time_ns=dump_time or 0,
    )


def placed(table: pa.Table, placement: Placement) -> pa.Table:
    """``table`` with where its rank ran on every row."""
    values = {
        "host": placement.host,
        "local_rank": placement.local_rank,
        "device": placement.device,
    }
    for name, value in values.items():
        if value is None or name not in table.column_names:
            continue
        at = table.schema.get_field_index(name)
        field_ = table.schema.field(at)
        table = table.set_column(
            at, field_, pa.repeat(pa.scalar(value, field_.type), table.num_rows)
        )
    return table


def load_and_stage_batch(tasks: list[Task]) -> list[Outcome]:
    return [load_and_stage(task) for task in tasks]


def _time_span(table: pa.Table) -> tuple[int, int] | None:
    times = table.column("time_created_ns")
    times = times.filter(pc.greater(times, pa.scalar(0, pa.int64())))
    if len(times) == 0:
        return None
    bounds = pc.min_max(times)
    return int(bounds["min"].as_py()), int(bounds["max"].as_py())
