"""Canonical rows for tests: a complete row to vary (``canonical_row``), and what a span
carries back into a row (``fr_otel.otel.otlp_import``, docs/span-model.md) and what it
does not, shared by the OTLP JSON and the Collector file round trips."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from fr_otel.schema import RECORD_SCHEMA

SPAN_CARRIED = (
    "job",
    "incident",
    "rank",
    "pg_name",
    "pg_desc",
    "pg_ranks",
    "record_id",
    "backend",
    "op",
    "peer",
    "is_p2p",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "state",
    "time_created_ns",
    "timeout_ms",
    "call_site",
    "api",
)
SPAN_NOT_CARRIED = (
    "pg_id",
    "op_id",
    "profiling_name",
    "time_started_ns",
    "duration_ms",
    "thread_name",
    "thread_id",
    "frames",
    "pg_last_enqueued_seq",
    "pg_last_started_seq",
    "pg_last_completed_seq",
    "source_file",
    "fr_version",
    "comm_lib_version",
)


def canonical_row(**values: Any) -> dict[str, Any]:
    """A complete canonical row: a completed nccl all_reduce, with ``values`` over it."""
    row: dict[str, Any] = dict.fromkeys(RECORD_SCHEMA.names)
    row.update(
        job="job",
        incident="inc",
        rank=0,
        pg_id=0,
        pg_name="0",
        pg_desc="default_pg",
        pg_ranks=[0, 1],
        pg_ranks_inferred=False,
        record_id=0,
        collective_seq_id=1,
        p2p_seq_id=0,
        backend="nccl",
        op="all_reduce",
        input_sizes=[[4, 8]],
        output_sizes=[[4, 8]],
        input_dtypes=["Float"],
        output_dtypes=["Float"],
        state="completed",
        time_created_ns=1_700_000_000_000_000_000,
        time_started_ns=1_700_000_000_000_000_100,
        time_completed_ns=1_700_000_000_000_000_200,
        retired=True,
        timeout_ms=600_000,
        is_p2p=False,
        call_site="/job/train.py:21 in train_step",
        api="all_reduce",
        dump_time_ns=1_700_000_000_100_000_000,
        source_format="simulator",
    )
    row.update(values)
    return row


def canonical_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=RECORD_SCHEMA)
