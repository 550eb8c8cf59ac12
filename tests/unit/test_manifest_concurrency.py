"""Ranks flushing into one incident at the same moment: the manifest lists every rank.

Real processes write real Parquet files and refresh the manifest concurrently, as a
recorder's all-rank flush does (the race once left a rank out of ``_incident.json``)."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pyarrow as pa

from fr_otel.archive.rows import write_rows
from fr_otel.schema import RECORD_SCHEMA

RANKS = 8
INCIDENTS = 40


def _flush(archive: str, rank: int, start: multiprocessing.synchronize.Event) -> None:
    row = {name: None for name in RECORD_SCHEMA.names}
    row.update(
        job="j",
        incident="i",
        rank=rank,
        pg_name="0",
        pg_desc="default_pg",
        pg_ranks=list(range(RANKS)),
        pg_ranks_inferred=False,
        record_id=0,
        collective_seq_id=1,
        op="all_reduce",
        source_format="recorder",
    )
    start.wait()
    # one flush per incident, many incidents: an unlucky interleaving all but certain
    for incident in range(INCIDENTS):
        row["incident"] = f"i{incident}"
        write_rows(pa.Table.from_pylist([row], schema=RECORD_SCHEMA), Path(archive))


def test_concurrent_flushes_leave_every_rank_in_the_manifest(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    start = context.Event()
    workers = [
        context.Process(target=_flush, args=(str(tmp_path), rank, start)) for rank in range(RANKS)
    ]
    for worker in workers:
        worker.start()
    start.set()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    for incident in range(INCIDENTS):
        folder = tmp_path / "job=j" / f"incident=i{incident}"
        manifest = json.loads((folder / "_incident.json").read_text())
        assert manifest["ranks"] == list(range(RANKS)), incident
        assert manifest["missing_ranks"] == []
