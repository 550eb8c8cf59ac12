"""The slow-job fixtures (``tests/data/stragglers_<case>``) and what tests do to them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

DATA_DIR = Path(__file__).resolve().parent / "data"

TIME_COLUMNS = ("time_created_ns", "time_started_ns", "time_completed_ns", "dump_time_ns")


def straggler_fixture(case: str) -> tuple[Path, dict[str, Any]]:
    """The archive of case ``case`` (``one``, ``two``, ``jitter``) and its scenario."""
    folder = DATA_DIR / f"stragglers_{case}"
    if not (folder / "stragglers.json").is_file():
        raise FileNotFoundError(
            f"fixture stragglers_{case} is missing ({folder}); regenerate it with:"
            f" python tests/data/generate_stragglers.py --only {case}"
        )
    return folder / "archive", json.loads((folder / "stragglers.json").read_text())


def copy_archive(archive: Path, target: Path) -> Path:
    shutil.copytree(archive, target)
    return target


def rank_file(archive: Path, rank: int) -> Path:
    [path] = list(archive.glob(f"job=*/incident=*/rank-{rank:06d}.parquet"))
    return path


def shift_clock(archive: Path, rank: int, shift_ns: int) -> None:
    """Move every time of ``rank``'s file by ``shift_ns``, as if its host's clock were off."""
    path = rank_file(archive, rank)
    table = pq.read_table(path)
    for column in TIME_COLUMNS:
        index = table.schema.get_field_index(column)
        shifted = pc.add(table[column], pa.scalar(shift_ns, pa.int64()))
        table = table.set_column(index, table.schema.field(index), shifted)
    pq.write_table(table, path)


def cut_last(archive: Path, rank: int, entries: int) -> None:
    """Leave the last ``entries`` records out of ``rank``'s file: caught earlier in the loop."""
    path = rank_file(archive, rank)
    table = pq.read_table(path).sort_by("record_id")
    pq.write_table(table.slice(0, table.num_rows - entries), path)


def unfinish_last(archive: Path, rank: int) -> None:
    """Make ``rank``'s last record look in flight (not yet completed) when it was copied."""
    path = rank_file(archive, rank)
    table = pq.read_table(path).sort_by("record_id")
    last = table.num_rows - 1
    state = table["state"].to_pylist()
    completed = table["time_completed_ns"].to_pylist()
    retired = table["retired"].to_pylist()
    state[last], completed[last], retired[last] = "scheduled", None, False
    for column, values in (
        ("state", state),
        ("time_completed_ns", completed),
        ("retired", retired),
    ):
        index = table.schema.get_field_index(column)
        field = table.schema.field(index)
        table = table.set_column(index, field, pa.array(values, field.type))
    pq.write_table(table, path)
