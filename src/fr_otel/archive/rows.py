"""Write canonical rows that did not come from dump files (spans read back, a recorder
flush) into the archive: one file per (job, incident, rank), plus the manifest."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from fr_otel.archive.layout import commit_staged, discard_staged, rank_file, write_staged
from fr_otel.archive.manifest import GroupMembers, refresh_manifest
from fr_otel.schema import RECORD_SCHEMA


def write_rows(table: pa.Table, archive: Path) -> list[Path]:
    """Write ``table`` (canonical schema) into ``archive``; return the files written.

    Like ``import_dumps``: each rank's file replaces the one an earlier write left, so
    writing the same rows twice does not duplicate them.
    """
    table = table.select(RECORD_SCHEMA.names).cast(RECORD_SCHEMA)
    written: list[Path] = []
    keys = (
        table.select(["job", "incident", "rank"])
        .group_by(["job", "incident", "rank"])
        .aggregate([])
    )
    staged: list[tuple[Path, Path]] = []
    try:
        for job, incident, rank in zip(
            *(keys.column(c).to_pylist() for c in keys.column_names), strict=True
        ):
            # Arrow scalars: a Python literal makes pyarrow try to import dateutil each call
            mask = pc.and_(
                pc.and_(
                    pc.equal(table["job"], pa.scalar(job, pa.string())),
                    pc.equal(table["incident"], pa.scalar(incident, pa.string())),
                ),
                pc.equal(table["rank"], pa.scalar(rank, pa.int64())),
            )
            final = rank_file(archive, job, incident, rank)
            staged.append((write_staged(table.filter(mask), final), final))
        for temporary, final in staged:
            commit_staged(temporary, final)
            written.append(final)
    finally:
        for temporary, final in staged:
            if final not in written:
                discard_staged(temporary)
    for job, incident in {(p.parent.parent.name[4:], p.parent.name[9:]) for p in written}:
        _update_manifest(archive, job, incident, table)
    return written


def _update_manifest(archive: Path, job: str, incident: str, table: pa.Table) -> None:
    mine = table.filter(
        pc.and_(
            pc.equal(table["job"], pa.scalar(job, pa.string())),
            pc.equal(table["incident"], pa.scalar(incident, pa.string())),
        )
    )
    groups: dict[str, GroupMembers] = {}
    for row in mine.select(["pg_name", "pg_desc", "pg_ranks"]).to_pylist():
        if row["pg_ranks"] and row["pg_name"] not in groups:
            groups[row["pg_name"]] = GroupMembers(
                name=row["pg_name"],
                desc=row["pg_desc"],
                ranks=tuple(row["pg_ranks"]),
                inferred=False,
            )
    refresh_manifest(archive, job, incident, groups.values())
