"""Where each rank ran, as a real gloo job's recorder writes it on every archived row."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from fr_otel.archive.layout import partition_dir
from fr_otel.demo.recorded_job import run_recorded

pytestmark = pytest.mark.gloo


def test_rows_carry_host_and_local_rank_and_no_device_on_gloo(tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    run = run_recorded(
        "skipped_collective", archive, job="placed", environment={"FR_OTEL_HOST": "node-a7"}
    )
    [incident] = run.incidents()
    folder = partition_dir(archive, "placed", incident)
    for rank in range(run.world):
        rows = pq.read_table(
            folder / f"rank-{rank:06d}.parquet", columns=["rank", "host", "local_rank", "device"]
        ).to_pylist()
        assert rows, rank
        # the launcher gives every rank LOCAL_RANK = RANK (one host); gloo drives no GPU
        assert {(r["host"], r["local_rank"], r["device"]) for r in rows} == {
            ("node-a7", rank, None)
        }, rank
