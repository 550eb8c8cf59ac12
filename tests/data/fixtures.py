"""Locate the committed fixture folders under tests/data (``gloo_<scenario>`` from the demo
job, ``workload_<case>`` from tests/workloads/), failing loudly when one is missing.

Tests load this file by path (``tests`` is not a package), for example::

    spec = importlib.util.spec_from_file_location("fixtures", DATA_DIR / "fixtures.py")
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent


def fixture_dir(name: str) -> Path:
    """The folder of gloo scenario ``name`` (``size_mismatch`` or ``gloo_size_mismatch``).

    Raises ``FileNotFoundError`` naming the scenario and the command that regenerates it.
    """
    scenario = name.removeprefix("gloo_")
    folder = DATA_DIR / f"gloo_{scenario}"
    if not (folder / "scenario.json").is_file():
        raise FileNotFoundError(
            f"fixture for gloo scenario {scenario!r} is missing ({folder}); regenerate it "
            f"with: python tests/data/generate_gloo.py --only {scenario}"
        )
    return folder


def workload_dir(name: str) -> Path:
    """The folder of workload case ``name`` (``mesh2d_hang`` or ``workload_mesh2d_hang``).

    Raises ``FileNotFoundError`` naming the case and the command that regenerates it.
    """
    case = name.removeprefix("workload_")
    folder = DATA_DIR / f"workload_{case}"
    if not (folder / "scenario.json").is_file():
        raise FileNotFoundError(
            f"fixture for workload case {case!r} is missing ({folder}); regenerate it "
            f"with: python tests/data/generate_workloads.py --only {case}"
        )
    return folder


def workload_cases() -> list[str]:
    """Every committed workload case, by name."""
    return sorted(
        p.name.removeprefix("workload_")
        for p in DATA_DIR.glob("workload_*")
        if (p / "scenario.json").is_file()
    )
