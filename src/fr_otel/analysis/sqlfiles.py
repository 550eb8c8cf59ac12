"""Running the analyzer's SQL files (``sql/*.sql``, beside this module) on DuckDB.

Every table the analysis builds is made by one of these files: the passes that run in
order (``NN_name.sql``) and the ones the analysis picks from (``groups_from_rows.sql``,
``groups_from_manifest.sql``, ``dumped.sql`` after the first pass, made or loaded, the
snapshot's ``snapshot_frontier.sql``, the views of ``fr-otel sql``), which ``run_file``
runs; ``query_file`` runs the queries whose rows Python reads back
(``site_lateness.sql``, ``site_occasions.sql``), and ``fragment`` hands out the pieces
Python puts together (the arrival rows, ``arrival.sql``, over one of two ``coll`` CTEs and
the clock offsets' ``clock.sql``). Each statement the first two run is logged at DEBUG level
(``-vv``) with the time it took, on the ``fr_otel.analysis.sql`` logger.
"""

from __future__ import annotations

import logging
import re
import time
from importlib import resources
from typing import TYPE_CHECKING, Any

from fr_otel.schema import ALL_GATHER_OPS, ENTRY_MACROS
from fr_otel.stacks import LIBRARY_FRAME_PATTERN

if TYPE_CHECKING:
    import duckdb

_PARAM = re.compile(r"\$([a-z_]+)")
_PASS = re.compile(r"\d\d_\w+\.sql")
_trace = logging.getLogger("fr_otel.analysis.sql")

# Ops whose sizes legitimately differ across a group's ranks: compared without sizes,
# checked by rules instead.
VARIABLE_SIZE_OPS = [
    "all_to_all",
    "all_to_all_single",
    "all_to_allv",
    "alltoall",
    "alltoall_base",
    "gather",
    "scatter",
    "_reduce_scatter_base_uneven",
]
ALL_TO_ALL_OPS = ["all_to_all", "all_to_all_single", "all_to_allv", "alltoall", "alltoall_base"]
REDUCE_SCATTER_OPS = [
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced",
]
ALL_REDUCE_OPS = ["all_reduce", "allreduce_coalesced", "all_reduce_coalesced"]

CONSTANTS: dict[str, Any] = {
    "library_frame_pattern": LIBRARY_FRAME_PATTERN,
    "variable_size_ops": VARIABLE_SIZE_OPS,
    "all_to_all_ops": ALL_TO_ALL_OPS,
    "all_gather_ops": sorted(ALL_GATHER_OPS),
    "reduce_scatter_ops": REDUCE_SCATTER_OPS,
    "all_reduce_ops": ALL_REDUCE_OPS,
}


def _text(name: str) -> str:
    return resources.files("fr_otel.analysis").joinpath("sql", name).read_text()


def statements(name: str) -> list[str]:
    """The statements of ``sql/<name>``, without comments-only fragments."""
    text = _text(name)
    parts = [p.strip() for p in text.split(";\n")]
    return [
        p
        for p in parts
        if any(not line.lstrip().startswith("--") for line in p.splitlines() if line.strip())
    ]


def fragment(name: str, **values: object) -> str:
    """The text of ``sql/<name>``, a piece that Python puts into a statement (a CTE, a
    query), without the comment lines that head the file and with its ``{name}`` places
    filled in from ``values``."""
    lines = _text(name).splitlines(keepends=True)
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines.pop(0)
    return "".join(lines).format(**values)


def prepare(connection: duckdb.DuckDBPyConnection) -> None:
    """Create the rules every query over canonical rows shares (``schema.ENTRY_MACROS``:
    ``entry_p2p``, ``entry_done``) in ``connection``. Temporary, so each connection (a
    cursor too) makes its own: ``register_archive`` and ``run_file`` call this."""
    for statement in ENTRY_MACROS:
        connection.execute(statement)


def sql_string(text: str) -> str:
    """``text`` as a SQL string literal (a file's path, where a statement such as ``COPY``
    takes no parameter)."""
    return "'" + text.replace("'", "''") + "'"


def group_key(by_name: bool) -> str:
    """The SQL of a row's group id (``gid``) over canonical rows: its group's name where
    names identify groups in the incident, else its name and members."""
    return "hash(pg_name)" if by_name else "hash(pg_name, pg_ranks)"


def run_file(
    connection: duckdb.DuckDBPyConnection,
    name: str,
    params: dict[str, Any],
    text: dict[str, str] | None = None,
) -> None:
    """Execute every statement of ``sql/<name>``, binding the ``$name`` parameters it uses.
    ``text``: SQL written in place of each ``{name}`` (what decides which columns a query
    reads, which a parameter cannot: DuckDB plans every branch of a CASE on one)."""
    prepare(connection)
    for statement in rendered(name, text):
        _execute(connection, name, statement, params)


def rendered(name: str, text: dict[str, str] | None = None) -> list[str]:
    """The statements of ``sql/<name>`` as ``run_file`` runs them, ``text`` written in."""
    out = []
    for statement in statements(name):
        for key, value in (text or {}).items():
            statement = statement.replace("{" + key + "}", value)
        out.append(statement)
    return out


def query_file(
    connection: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """Execute the one query of ``sql/<name>``, binding the ``$name`` parameters it uses;
    fetch its rows from what this returns."""
    (statement,) = statements(name)
    return _execute(connection, name, statement, params or {})


def _execute(
    connection: duckdb.DuckDBPyConnection, name: str, statement: str, params: dict[str, Any]
) -> duckdb.DuckDBPyConnection:
    values = {**CONSTANTS, **params}
    used = {key: values[key] for key in _PARAM.findall(statement)}
    start = time.perf_counter()
    result = connection.execute(statement, used or None)
    if _trace.isEnabledFor(logging.DEBUG):
        first = next(
            (line for line in statement.splitlines() if not line.lstrip().startswith("--")),
            "",
        )
        _trace.debug("%s: %.3f s: %s", name, time.perf_counter() - start, first.strip())
    return result


def sql_files() -> list[str]:
    """The SQL passes (``NN_name.sql``), in the order they run."""
    folder = resources.files("fr_otel.analysis").joinpath("sql")
    return sorted(p.name for p in folder.iterdir() if _PASS.fullmatch(p.name))
