"""How the analysis opens DuckDB (``source.connect``): while the caller loads the
analysis's modules, in a thread of its own; an error on either side is raised in the
caller's thread, and nothing is left open or running."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import duckdb
import pytest

from fr_otel.analysis.source import connect

WAIT = 10.0


def _watched_connect(monkeypatch: pytest.MonkeyPatch, seen: dict[str, Any]) -> threading.Event:
    """Make ``duckdb.connect`` record its thread and wait (briefly) for the caller's work
    to start; returns the event the caller's work sets."""
    real = duckdb.connect
    working = threading.Event()

    def watched(*args: Any, **kwargs: Any) -> duckdb.DuckDBPyConnection:
        seen["thread"] = threading.current_thread()
        seen["met"] = working.wait(WAIT)  # the caller's work ran while this did
        seen["connection"] = real(*args, **kwargs)
        return seen["connection"]

    monkeypatch.setattr(duckdb, "connect", watched)
    return working


def test_the_database_opens_in_its_own_thread_while_the_caller_works(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, Any] = {}
    working = _watched_connect(monkeypatch, seen)

    def meanwhile() -> None:
        seen["caller"] = threading.current_thread()
        working.set()

    with contextlib.ExitStack() as stack:
        connection = connect(stack, "300MB", meanwhile=meanwhile)
        (limit,) = connection.execute("SELECT current_setting('memory_limit')").fetchone()
        assert limit == "286.1 MiB"  # the settings reached the thread's connect
    assert seen["caller"] is threading.main_thread()
    assert seen["thread"] is not threading.main_thread()
    assert seen["met"] is True
    assert not seen["thread"].is_alive()


def test_an_error_opening_the_database_is_raised_in_the_callers_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refused(*args: Any, **kwargs: Any) -> duckdb.DuckDBPyConnection:
        raise duckdb.IOException("no room for the database")

    monkeypatch.setattr(duckdb, "connect", refused)
    ran: list[bool] = []
    with contextlib.ExitStack() as stack, pytest.raises(duckdb.IOException, match="no room"):
        connect(stack, meanwhile=lambda: ran.append(True))
    assert ran == [True]


def test_when_the_callers_work_fails_the_database_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, Any] = {}
    working = _watched_connect(monkeypatch, seen)

    def meanwhile() -> None:
        working.set()
        raise RuntimeError("an analysis module failed to load")

    with contextlib.ExitStack() as stack, pytest.raises(RuntimeError, match="failed to load"):
        connect(stack, meanwhile=meanwhile)
    assert not seen["thread"].is_alive()
    with pytest.raises(duckdb.ConnectionException):
        seen["connection"].execute("SELECT 1")
