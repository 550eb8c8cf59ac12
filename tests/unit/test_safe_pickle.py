"""The restricted unpickler refuses anything that could run code, and runs none of it."""

from __future__ import annotations

import os
import pickle
import pickletools
from pathlib import Path

import pytest

from fr_otel.dumps.safe_pickle import UnsafePickleError, loads_plain


class _RunsCommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {self.marker}",))


def test_plain_fr_data_loads() -> None:
    data = {"version": "2.10", "entries": [{"process_group": ("0", "default_pg"), "x": None}]}
    assert loads_plain(pickle.dumps(data, protocol=2)) == data


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_reduce_to_os_system_is_refused_and_not_run(tmp_path: Path, protocol: int) -> None:
    marker = tmp_path / "pwned"
    payload = pickle.dumps(
        {"version": "2.10", "entries": [_RunsCommand(marker)]}, protocol=protocol
    )
    with pytest.raises(UnsafePickleError) as info:
        loads_plain(payload)
    assert "system" in str(info.value)
    assert not marker.exists()
    # the same bytes do run code through plain pickle: the test payload is real
    pickle.loads(payload)
    assert marker.exists()


def test_any_global_is_refused_even_harmless_ones() -> None:
    payload = pickle.dumps({"when": __import__("datetime").date(2026, 1, 1)}, protocol=2)
    assert any(op.name in {"GLOBAL", "STACK_GLOBAL"} for op, _, _ in pickletools.genops(payload))
    with pytest.raises(UnsafePickleError, match=r"datetime\.date"):
        loads_plain(payload)


def test_persistent_ids_are_refused() -> None:
    payload = b"\x80\x02P0\n."  # PERSID '0'
    with pytest.raises(UnsafePickleError, match="persistent"):
        loads_plain(payload)
