"""The rules over rows (``schema.is_p2p_entry``, ``is_done_entry``) and their DuckDB macros
(``entry_p2p``, ``entry_done``) agree on every combination of values, nulls included."""

from __future__ import annotations

import itertools

import duckdb
import pytest

from fr_otel.analysis.sqlfiles import prepare
from fr_otel.schema import is_done_entry, is_p2p_entry


@pytest.fixture
def connection() -> duckdb.DuckDBPyConnection:
    connection = duckdb.connect()
    prepare(connection)
    return connection


FLAGS = (True, False, None)


def test_p2p_is_the_flag_or_a_send_or_recv(connection: duckdb.DuckDBPyConnection) -> None:
    for is_p2p, op in itertools.product(FLAGS, ("send", "recv", "all_reduce", "coalesced")):
        expected = bool(is_p2p) or op in ("send", "recv")
        assert is_p2p_entry(is_p2p=is_p2p, op=op) is expected
        (got,) = connection.execute("SELECT entry_p2p(?, ?)", [is_p2p, op]).fetchone() or ()
        assert got is expected, (is_p2p, op)


def test_done_is_completed_or_retired_by_gloo(connection: duckdb.DuckDBPyConnection) -> None:
    states = ("completed", "started", "scheduled", None)
    for state, backend, retired in itertools.product(states, ("gloo", "nccl", None), FLAGS):
        expected = state == "completed" or (backend == "gloo" and bool(retired))
        assert is_done_entry(state=state, backend=backend, retired=retired) is expected
        (got,) = (
            connection.execute("SELECT entry_done(?, ?, ?)", [state, backend, retired]).fetchone()
            or ()
        )
        # SQL's three-valued logic: unknown where a null state decides, never true
        assert (got or False) is expected, (state, backend, retired)


def test_a_cursor_prepares_its_own_macros(connection: duckdb.DuckDBPyConnection) -> None:
    """They are temporary: each connection the analysis opens (a cursor too) creates them."""
    cursor = connection.cursor()
    with pytest.raises(duckdb.Error):
        cursor.execute("SELECT entry_p2p(true, 'send')")
    prepare(cursor)
    assert cursor.execute("SELECT entry_p2p(false, 'send')").fetchone() == (True,)
