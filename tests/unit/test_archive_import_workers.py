"""The import's worker processes: set up for converting one dump after another."""

from __future__ import annotations

import gc
import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from fr_otel.archive import duplicate_ranks, importer, workers
from fr_otel.sim import FleetSpec, simulate, write_fleet
from tests.import_attempts import import_attempts


def _gc_state_after_init(parent: int) -> bool:
    workers._worker_init(parent)
    return gc.isenabled()


def test_workers_run_without_the_cyclic_gc() -> None:
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        assert pool.apply(_gc_state_after_init, (os.getpid(),)) is False
    assert gc.isenabled()  # the parent's is left alone


def test_ranks_of_a_group_share_one_member_list(tmp_path: Path, monkeypatch: Any) -> None:
    # a rank of an 8,192-rank job knows 9,222 member ranks: one copy per rank held 2.7 GB
    fleet = simulate(FleetSpec(world=16, entries=100, tp=2, pp=2))
    write_fleet(fleet, tmp_path / "dumps")
    seen: list[Any] = []
    pick = duplicate_ranks.pick_per_rank

    def spy(outcomes: list[Any], report: Any) -> Any:
        seen.extend(outcomes)
        return pick(outcomes, report)

    monkeypatch.setattr(importer, "pick_per_rank", spy)  # where the import looks it up
    report = importer.import_dumps([tmp_path / "dumps"], archive=tmp_path / "a", workers=2)
    assert report.ok and len(seen) == 16
    lists: dict[str, list[Any]] = {}
    for outcome in seen:
        for name, group in outcome.groups.items():
            lists.setdefault(name, []).append(group.ranks)
    world = [g for g in lists.values() if len(g) == 16]
    assert world, "no group that every rank is in"
    for name, members in lists.items():
        assert all(m == members[0] for m in members), name  # what the dumps say, unchanged
        assert all(m is members[0] for m in members), name  # and one list for all of them


def _fleet(tmp_path: Path, world: int) -> Path:
    write_fleet(simulate(FleetSpec(world=world, entries=50)), tmp_path / "dumps")
    return tmp_path / "dumps"


def test_the_callers_work_runs_once_while_the_workers_convert(tmp_path: Path) -> None:
    dumps = _fleet(tmp_path, 16)
    seen: list[tuple[int, int]] = []

    def meanwhile() -> None:
        # the workers are running, and the import has committed no rank file yet
        committed = list(tmp_path.rglob("*.parquet"))
        seen.append((len(multiprocessing.active_children()), len(committed)))

    report = importer.import_dumps([dumps], archive=tmp_path / "a", workers=2, meanwhile=meanwhile)
    assert report.ok and len(report.files_written) == 16
    assert seen == [(2, 0)]


def test_with_too_few_dumps_for_workers_it_runs_before_the_conversion(tmp_path: Path) -> None:
    dumps = _fleet(tmp_path, 2)
    seen: list[int] = []
    report = importer.import_dumps(
        [dumps],
        archive=tmp_path / "a",
        workers=2,
        meanwhile=lambda: seen.append(len(list(tmp_path.rglob("*.parquet")))),
    )
    assert report.ok and len(report.files_written) == 2
    assert seen == [0]


def test_converting_a_dump_tries_to_import_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.15 ms a dump, 4% of a worker's time, before parse and the footers handed typed
    scalars (tests/import_attempts.py). Both kinds of rank file, converted in this process
    (one worker)."""
    dumps = _fleet(tmp_path, 4)
    for scratch_files in (False, True):  # once, so that what is used is loaded
        importer.import_dumps(
            [dumps], archive=tmp_path / "warm", workers=1, scratch_files=scratch_files
        )
    with import_attempts(monkeypatch) as attempts:
        for scratch_files in (False, True):
            archive = tmp_path / f"scratch-{scratch_files}"
            report = importer.import_dumps(
                [dumps], archive=archive, workers=1, scratch_files=scratch_files
            )
            assert report.ok and len(report.files_written) == 4
    assert attempts == []
