"""A simulated fleet's incidents of several sizes: each runs on between
``hosts_per_incident`` and ``max_hosts_per_incident`` hosts, a whole number of hosts'
ranks, and the bounds are checked. The archive is real (simulated dumps imported)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from fr_otel.errors import SimulationError
from fr_otel.fleet.simulated import FleetArchiveSpec, write_fleet_archive


def test_incidents_run_on_hosts_between_the_bounds(tmp_path: Path) -> None:
    spec = FleetArchiveSpec(
        incidents=6,
        hosts=8,
        hosts_per_incident=2,
        max_hosts_per_incident=5,
        ranks_per_host=2,
        seed=3,
    )
    truth = write_fleet_archive(spec, tmp_path / "fleet")
    ranks = Counter(
        path.parent.relative_to(tmp_path / "fleet").as_posix()
        for path in (tmp_path / "fleet").glob("job=*/incident=*/*.parquet")
    )
    assert len(ranks) == 6 == len(truth.blamed)
    sizes = set(ranks.values())
    assert sizes <= {4, 6, 8, 10}, ranks
    assert len(sizes) > 1, ranks


@pytest.mark.parametrize("most", [1, 9])
def test_the_largest_incident_lies_between_the_smallest_and_the_pool(most: int) -> None:
    with pytest.raises(SimulationError, match="max_hosts_per_incident"):
        FleetArchiveSpec(incidents=1, hosts=8, hosts_per_incident=2, max_hosts_per_incident=most)
