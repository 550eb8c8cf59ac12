"""Imports attempted while a block runs, of modules not loaded yet: pyarrow infers the type
of an untyped scalar given to a compute function and on the way tries to import dateutil,
each call, where it is not installed (0.1-0.15 ms a call). Hot paths hand typed scalars;
tests of them assert that this list stays empty."""

from __future__ import annotations

import builtins
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@contextlib.contextmanager
def import_attempts(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The names imported inside the block that were not in ``sys.modules``."""
    attempts: list[str] = []
    real_import = builtins.__import__

    def counting_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name not in sys.modules:
            attempts.append(name)
        return real_import(name, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(builtins, "__import__", counting_import)
        yield attempts
