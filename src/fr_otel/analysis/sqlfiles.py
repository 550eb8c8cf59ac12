"""Running the analyzer's SQL files (``sql/NN_name.sql``, beside this module) on DuckDB."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import duckdb

from fr_otel.schema import ENTRY_MACROS
from fr_otel.stacks import LIBRARY_FRAME_PATTERN

_PARAM = re.compile(r"\$([a-z_]+)")

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
ALL_GATHER_OPS = [
    "all_gather",
    "_all_gather_base",
    "all_gather_into_tensor",
    "all_gather_into_tensor_coalesced",
    "allgather_into_tensor_coalesced",
]
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
    "all_gather_ops": ALL_GATHER_OPS,
    "reduce_scatter_ops": REDUCE_SCATTER_OPS,
    "all_reduce_ops": ALL_REDUCE_OPS,
}


def statements(name: str) -> list[str]:
    """The statements of ``sql/<name>``, without comments-only fragments."""
    text = resources.files("fr_otel.analysis").joinpath("sql", name).read_text()
    parts = [p.strip() for p in text.split(";\n")]
    return [
        p
        for p in parts
        if any(not line.lstrip().startswith("--") for line in p.splitlines() if line.strip())
    ]


def prepare(connection: duckdb.DuckDBPyConnection) -> None:
    """Create the rules every query over canonical rows shares (``schema.ENTRY_MACROS``:
    ``entry_p2p``, ``entry_done``) in ``connection``. Temporary, so each connection (a
    cursor too) makes its own: ``register_archive`` and ``run_file`` call this."""
    for statement in ENTRY_MACROS:
        connection.execute(statement)


def run_file(connection: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any]) -> None:
    """Execute every statement of ``sql/<name>``, binding the ``$name`` parameters it uses."""
    prepare(connection)
    values = {**CONSTANTS, **params}
    for statement in statements(name):
        used = {key: values[key] for key in _PARAM.findall(statement)}
        connection.execute(statement, used or None)


def sql_files() -> list[str]:
    """The SQL files in the order they run."""
    folder = resources.files("fr_otel.analysis").joinpath("sql")
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))
