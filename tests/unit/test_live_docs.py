"""docs/live-diagnosis.md documents every variable of the live check (the README's table
lists the others, ``tests/unit/test_docs.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fr_otel import config

DOC = Path(__file__).resolve().parents[2] / "docs" / "live-diagnosis.md"


@pytest.mark.parametrize("variable", config.LIVE_VARIABLES)
def test_every_live_variable_is_in_the_live_diagnosis_doc(variable: str) -> None:
    assert f"| `{variable}` |" in DOC.read_text()
