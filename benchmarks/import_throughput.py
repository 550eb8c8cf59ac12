"""Import throughput: fr-otel import vs. the floor, plain pickle.load of the same files.

Writes a simulated NCCL fleet (256 ranks x 2000 entries with stack frames by default),
then, in one run, times:

- the floor: ``pickle.load`` of every dump file in one process (what any Python tool,
  torchfrtrace included, pays before doing anything with the data), also with the GC
  off as torchfrtrace's loader does;
- ``fr_otel.archive.import_dumps`` into a fresh archive with all cores (the C decoder
  straight to Arrow columns, conversion to the canonical schema, Parquet write), and
  with one worker;
- the same with all cores and ``FR_OTEL_PURE_PYTHON=1``: the general path (restricted
  unpickler, then the struct conversion), which reads every dump the decoder declines.

Goal: fr-otel's wall time at most 2x the floor.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import shutil
import time
from pathlib import Path

from fr_otel.archive import import_dumps
from fr_otel.config import FR_OTEL_PURE_PYTHON
from fr_otel.sim import FleetSpec, simulate, write_fleet


def _floor(files: list[Path], *, gc_off: bool = False) -> tuple[float, int]:
    if gc_off:
        gc.disable()
    try:
        start = time.perf_counter()
        entries = 0
        for path in files:
            with path.open("rb") as handle:
                entries += len(pickle.load(handle)["entries"])
        return time.perf_counter() - start, entries
    finally:
        gc.enable()


def _ours(
    dumps: Path, archive: Path, workers: int | None, *, pure_python: bool = False
) -> tuple[float, int]:
    shutil.rmtree(archive, ignore_errors=True)
    if pure_python:  # the forked workers inherit it
        os.environ[FR_OTEL_PURE_PYTHON] = "1"
    try:
        start = time.perf_counter()
        report = import_dumps([dumps], archive=archive, incident="bench", workers=workers)
        elapsed = time.perf_counter() - start
    finally:
        os.environ.pop(FR_OTEL_PURE_PYTHON, None)
    if not report.ok:
        raise SystemExit(f"import failed: {report.problems[:3]}")
    return elapsed, report.entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world", type=int, default=256)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=Path("bench-out/import"))
    parser.add_argument("--repeat", type=int, default=3, help="best of N for each timing")
    args = parser.parse_args()

    dumps = args.out / "dumps"
    shutil.rmtree(args.out, ignore_errors=True)
    start = time.perf_counter()
    fleet = simulate(FleetSpec(world=args.world, entries=args.entries, fault="none"))
    files = write_fleet(fleet, dumps)
    size_mb = sum(f.stat().st_size for f in files) / 1e6
    print(
        f"fleet: {args.world} ranks x {args.entries} entries, {len(files)} pickle files,"
        f" {size_mb:.0f} MB, written in {time.perf_counter() - start:.1f}s; {os.cpu_count()} cores"
    )

    floor_s, floor_entries = min(_floor(files) for _ in range(args.repeat))
    # torchfrtrace's loader disables the GC while loading; show that floor too
    nogc_s, _ = min(_floor(files, gc_off=True) for _ in range(args.repeat))
    all_s, all_entries = min(_ours(dumps, args.out / "archive", None) for _ in range(args.repeat))
    one_s, _ = min(_ours(dumps, args.out / "archive1", 1) for _ in range(args.repeat))
    general_s, general_entries = min(
        _ours(dumps, args.out / "archive2", None, pure_python=True) for _ in range(args.repeat)
    )
    if general_entries != all_entries:
        raise SystemExit(f"row count mismatch: general path {general_entries}, {all_entries}")
    if all_entries != floor_entries:
        raise SystemExit(f"row count mismatch: imported {all_entries}, dumps hold {floor_entries}")

    print(f"{'':34}{'wall s':>8}{'entries/s':>14}{'x floor':>9}")
    for label, seconds in (
        ("floor: pickle.load, 1 process", floor_s),
        ("pickle.load with GC off", nogc_s),
        ("fr-otel import, all cores", all_s),
        ("fr-otel import, 1 worker", one_s),
        ("fr-otel import, general path", general_s),
    ):
        print(f"{label:34}{seconds:8.2f}{floor_entries / seconds:14,.0f}{seconds / floor_s:9.2f}")
    goal = all_s <= 2 * floor_s
    print(f"goal (all cores <= 2x floor): {'met' if goal else 'NOT met'}")


if __name__ == "__main__":
    main()
