"""The import's worker processes: set up for converting one dump after another."""

from __future__ import annotations

import gc
import multiprocessing
import os
from pathlib import Path
from typing import Any

from fr_otel.archive import importer
from fr_otel.sim import FleetSpec, simulate, write_fleet


def _gc_state_after_init(parent: int) -> bool:
    importer._worker_init(parent)
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
    pick = importer._pick_per_rank

    def spy(outcomes: list[Any], report: Any) -> Any:
        seen.extend(outcomes)
        return pick(outcomes, report)

    monkeypatch.setattr(importer, "_pick_per_rank", spy)
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
