"""SQL an agent sends, run read-only over an archive's documented views.

An agent is not the archive's owner: what it sends must not write anything, attach
another database, read a file outside the archive, load an extension, reach the network
or change a setting. Two locks, each enough for most of it, neither trusted alone:

- the statement: DuckDB's own parser must find exactly one statement, of the SELECT kind
  (``SELECT``, ``WITH``, ``FROM``, ``VALUES``, ``DESCRIBE``, ``SHOW``, ``SUMMARIZE``), and
  every table function it calls must be one of ``ALLOWED_TABLE_FUNCTIONS``: some table
  functions change the database or run a statement hidden in a string (``query``,
  ``checkpoint``, the external resource functions), which no statement type shows;
- the connection: once the views are made, DuckDB's locked-down settings (no external
  access but to the archive's folder, no extension loaded or installed, no Python object
  read by name, a memory limit and a thread count), then ``lock_configuration``, so no
  statement can set them back.

A query runs on a connection of its own, stopped (``interrupt``) past its time, and
returns at most ``max_rows`` rows and about ``max_bytes`` of JSON.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fr_otel.errors import QueryFailed, QueryRefused

if TYPE_CHECKING:
    import duckdb

ALLOWED_TABLE_FUNCTIONS = frozenset(
    {
        # files: DuckDB lets them read only inside the archive (``lock_down``)
        "read_parquet",
        "parquet_scan",
        "parquet_metadata",
        "parquet_schema",
        "parquet_file_metadata",
        "parquet_kv_metadata",
        "read_csv",
        "read_csv_auto",
        "read_json",
        "read_json_auto",
        "read_ndjson",
        "read_ndjson_auto",
        "read_json_objects",
        "read_ndjson_objects",
        "read_text",
        "read_blob",
        "glob",
        # values
        "range",
        "generate_series",
        "unnest",
        "json_each",
        "json_tree",
        # the catalog: the views and their columns
        "duckdb_columns",
        "duckdb_tables",
        "duckdb_views",
        "duckdb_functions",
        "duckdb_types",
        "duckdb_keywords",
        "pragma_table_info",
        "pragma_show",
    }
)
"""The table functions a query may call. An allow list: a DuckDB release that adds a table
function with a side effect adds nothing an agent can call."""

_SELECT_KINDS = ("SELECT",)
"""``duckdb.StatementType`` names of read-only statements."""


@dataclass(frozen=True, kw_only=True, slots=True)
class QueryLimits:
    """What one query may take."""

    max_rows: int = 200
    """Rows returned at most (``truncated`` says when there were more)."""
    max_bytes: int = 1_000_000
    """The rows' JSON at most, about: rows past it are left out (``truncated``)."""
    timeout_s: float = 30.0
    """The query is stopped past it (the views' making is not counted)."""
    threads: int = 2
    memory_limit: str | None = None
    """DuckDB's memory limit (``config.analysis_memory``'s default when None)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class QueryResult:
    """A query's answer as JSON values: its columns and its first rows."""

    columns: list[str]
    rows: list[list[Any]]
    truncated: bool
    """More rows than returned: past ``max_rows`` or ``max_bytes``."""
    unusable_files: list[str] = field(default_factory=list)
    """Rank files left out of the views (each with its problem)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": self.columns,
            "rows": self.rows,
            "row_count": len(self.rows),
            "truncated": self.truncated,
            "unusable_files": self.unusable_files,
        }


def checked_statement(query: str) -> str:
    """The text of the one read-only statement ``query`` holds; ``QueryRefused`` for
    anything else: no statement, several, another kind, or a table function outside
    ``ALLOWED_TABLE_FUNCTIONS``. Nothing is run: DuckDB only parses ``query``."""
    import duckdb

    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as exc:
        raise QueryFailed(f"the query does not parse: {_first_line(exc)}") from None
    if len(statements) != 1:
        raise QueryRefused(
            f"one statement at a time, and a read-only one; this query holds {len(statements)}"
        )
    statement = statements[0]
    if statement.type.name not in _SELECT_KINDS:
        raise QueryRefused(
            f"only read-only statements (SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE)"
            f" run here; this one is {statement.type.name}"
        )
    text: str = statement.query
    called = sorted(_table_functions(text) - ALLOWED_TABLE_FUNCTIONS)
    if called:
        raise QueryRefused(
            f"table function {', '.join(called)} is not allowed here; allowed:"
            f" {', '.join(sorted(ALLOWED_TABLE_FUNCTIONS))}"
        )
    return text


def _table_functions(text: str) -> set[str]:
    """Every table function ``text`` calls, wherever it is (subqueries, CTEs, joins), from
    DuckDB's own syntax tree; ``QueryRefused`` when DuckDB cannot write the tree out."""
    import duckdb

    with contextlib.closing(duckdb.connect(config={"enable_external_access": False})) as parser:
        row = parser.execute("SELECT json_serialize_sql(?)", [text]).fetchone()
    tree = json.loads(row[0]) if row is not None else {"error": True}
    if tree.get("error"):
        raise QueryRefused(
            f"the query cannot be checked: {tree.get('error_message', 'no syntax tree')}"
        )
    return {name.lower() for name in _function_names(tree)}


def _function_names(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if node.get("type") == "TABLE_FUNCTION":
            function = node.get("function") or {}
            yield str(function.get("function_name", ""))
        for value in node.values():
            yield from _function_names(value)
    elif isinstance(node, list):
        for value in node:
            yield from _function_names(value)


def lock_down(connection: duckdb.DuckDBPyConnection, archive: Path, threads: int) -> None:
    """DuckDB's locked-down settings on ``connection``, locked: files only under
    ``archive`` (an absolute path), no extension loaded or installed, no Python object
    read by name. No statement on ``connection`` can change a setting afterwards."""
    from fr_otel.analysis.sqlfiles import sql_string

    # named as a folder, with its separator: never a prefix of a sibling (archive-other)
    folder = archive.as_posix().rstrip("/") + "/"
    for statement in (
        f"SET allowed_directories = [{sql_string(folder)}]",
        "SET enable_external_access = false",
        "SET autoload_known_extensions = false",
        "SET autoinstall_known_extensions = false",
        "SET allow_community_extensions = false",
        "SET python_enable_replacements = false",
        f"SET threads = {int(threads)}",
        "SET lock_configuration = true",
    ):
        connection.execute(statement)


def run_readonly(archive: Path, query: str, limits: QueryLimits | None = None) -> QueryResult:
    """Run ``query`` over the views of ``archive`` (``analysis.views``), read-only.

    Raises ``QueryRefused`` for what is not run (see the module's docstring) and what
    DuckDB refuses, ``QueryFailed`` for a query DuckDB cannot run, ``ArchiveError`` when
    no rank file can be read.
    """
    from fr_otel.analysis.source import reading_damaged_files

    limits = limits or QueryLimits()
    text = checked_statement(query)
    folder = archive.resolve()
    return reading_damaged_files(lambda: _run(folder, text, limits))


def _run(archive: Path, text: str, limits: QueryLimits) -> QueryResult:
    import duckdb

    from fr_otel.analysis.source import connect, is_read_error, unusable_files
    from fr_otel.analysis.views import register_views

    with contextlib.ExitStack() as stack:
        connection = connect(stack, limits.memory_limit)
        wants_findings = re.search(r"\bfindings\b", text, re.I) is not None
        register_views(connection, archive, findings=wants_findings)
        problems = [str(p) for p in unusable_files(connection)]
        lock_down(connection, archive, limits.threads)
        timer = threading.Timer(limits.timeout_s, connection.interrupt)
        timer.daemon = True
        timer.start()
        try:
            relation = connection.sql(text)
            if relation is None:  # not a query after all: nothing to show
                return QueryResult(columns=[], rows=[], truncated=False, unusable_files=problems)
            columns = list(relation.columns)
            fetched = relation.limit(limits.max_rows + 1).fetchall()
        except duckdb.InterruptException:
            raise QueryRefused(
                f"the query ran past its {limits.timeout_s:g} s and was stopped"
            ) from None
        except duckdb.PermissionException as exc:
            raise QueryRefused(f"DuckDB refused it: {_first_line(exc)}") from None
        except duckdb.Error as exc:
            if is_read_error(exc) or isinstance(exc, duckdb.OutOfMemoryException):
                raise  # a damaged file: read again, checking every page
            raise QueryFailed(f"the query failed: {_first_line(exc)}") from None
        finally:
            timer.cancel()
    rows, cut = _within(fetched[: limits.max_rows], limits.max_bytes)
    return QueryResult(
        columns=columns,
        rows=rows,
        truncated=cut or len(fetched) > limits.max_rows,
        unusable_files=problems,
    )


def _within(fetched: list[tuple[Any, ...]], max_bytes: int) -> tuple[list[list[Any]], bool]:
    """The rows as JSON values, as many as fit in ``max_bytes``; and whether some did not."""
    rows: list[list[Any]] = []
    size = 0
    for row in fetched:
        values = [jsonable(value) for value in row]
        size += len(json.dumps(values))
        if size > max_bytes:
            return rows, True
        rows.append(values)
    return rows, False


def jsonable(value: Any) -> Any:
    """A DuckDB value as a JSON value: lists, maps and structs kept, floats that JSON
    cannot hold (NaN, infinities) and other types (times, decimals, UUIDs, bytes) as
    their text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    return str(value)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
