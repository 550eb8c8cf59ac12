"""Locate the committed fixture folders under tests/data, failing loudly when one is missing.

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
