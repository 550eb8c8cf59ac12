"""The MCP server of ``fr-otel mcp``: an archive's incidents, their analyses, their
findings explained, and read-only SQL over the documented views, as tools an agent calls.

Every tool reads; none writes. A job or incident is one the archive holds, named exactly
(``agents.incidents``); SQL runs locked down (``agents.readonly_sql``). One analysis or
query runs at a time: each may take DuckDB's whole memory limit. A failure the agent can
act on (an unknown incident, a refused query) comes back as the tool's error text; any
other is logged on the server's stderr and the agent sees only that the tool failed.

Needs the ``mcp`` package (fr_otel's ``mcp`` extra), imported by ``build_server`` only.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fr_otel import __version__
from fr_otel.agents.explain import explain_finding
from fr_otel.agents.incidents import Analyses, analysis_json, listed_incidents
from fr_otel.agents.readonly_sql import ALLOWED_TABLE_FUNCTIONS, QueryLimits, run_readonly
from fr_otel.errors import ArchiveError, FrOtelError, MissingDependencyError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

MCP_EXTRA_HINT = (
    "fr-otel mcp needs the mcp package, which is not installed: pip install 'fr-otel[mcp]'"
    " (from a clone of fr_otel: pip install '.[mcp]')"
)

_T = TypeVar("_T")


def build_server(archive: Path, *, limits: QueryLimits | None = None) -> MCPServer:
    """The MCP server over ``archive`` (an archive folder), not started: run it with
    ``.run()`` (stdio), or talk to it in-process with ``mcp.Client(server)``.

    Raises ``ArchiveError`` when ``archive`` is not an archive and
    ``MissingDependencyError`` when the mcp package is not installed.
    """
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
        from mcp.types import ToolAnnotations
    except ImportError as exc:
        raise MissingDependencyError(f"{MCP_EXTRA_HINT} ({exc})") from None
    from fr_otel.analysis.source import is_archive
    from fr_otel.analysis.views import VIEW_DOCS

    if not is_archive(archive):
        raise ArchiveError(f"{archive} is not an archive (no job=*/incident=* folders inside)")
    folder = archive.resolve()
    sql_limits = limits or QueryLimits()
    analyses = Analyses(folder, memory_limit=sql_limits.memory_limit)
    one_at_a_time = threading.Lock()

    def answer(work: Callable[[], _T]) -> _T:
        """``work``'s result; a failure the agent can act on as the tool's error text."""
        with one_at_a_time:
            try:
                return work()
            except FrOtelError as exc:
                raise ToolError(str(exc)) from None

    with _no_logging_setup():
        server: MCPServer = MCPServer(
            name="fr-otel",
            version=__version__,
            instructions=(
                f"The fr_otel archive {folder}: PyTorch Flight Recorder dumps of distributed"
                " jobs, one incident per hang or failure. list_incidents names them;"
                " analyze_incident finds what broke one (the culprit rank, the collective,"
                " the line of code; the root cause first); explain_finding details one"
                " finding; sql_query runs read-only SQL over the archive's views."
            ),
        )

    def list_incidents(job: str | None = None) -> dict[str, Any]:
        """The archive's incidents (of one job when given), oldest first within a job: ranks
        with a readable dump and missing ranks, entries, time span, unreadable files, the
        import writing one now, and what the live check named while the job ran. Pass an
        incident's job and incident to analyze_incident."""
        return answer(lambda: listed_incidents(folder, job))

    def analyze_incident(job: str, incident: str) -> dict[str, Any]:
        """Analyse one incident: the same JSON as `fr-otel analyze ARCHIVE --job J --incident
        I --format json` (docs/analysis.md): findings (kind, process group, collective
        sequence number, op, culprit_ranks, summary, evidence, stacks, consequence_of,
        waiting_ranks), root_cause (the index of the finding that explains the others; null
        when healthy or only slow), missing_dumps (ranks without a dump: unknown, never
        blamed), and live (what the live check named while the job ran). No findings:
        healthy."""
        return answer(lambda: analysis_json(folder, analyses.of(job, incident)))

    def explain(job: str, incident: str, index: int) -> dict[str, Any]:
        """Explain finding `index` (its place in analyze_incident's findings) of one
        incident: its role in the verdict, summary, evidence, call sites and stacks
        (culprits against the majority), the ranks involved (culprits, ranks waiting behind
        its cause and not at fault, suspects), its cause and its consequences."""
        return answer(lambda: explain_finding(analyses.of(job, incident), index))

    def sql_query(query: str) -> dict[str, Any]:
        return answer(lambda: run_readonly(folder, query, sql_limits).to_dict())

    views = "; ".join(f"{name}: {doc}" for name, doc in VIEW_DOCS.items())
    functions = ", ".join(sorted(ALLOWED_TABLE_FUNCTIONS))
    sql_query.__doc__ = (
        "Run one read-only SQL statement (DuckDB) over the archive's views and return its"
        f" columns and at most {sql_limits.max_rows} rows (truncated says when there were"
        f" more). Views: {views}. DESCRIBE <view> lists a view's columns. Only SELECT, WITH,"
        " FROM, VALUES, DESCRIBE, SHOW and SUMMARIZE run; files are read only inside the"
        f" archive; table functions allowed: {functions}. A query is stopped after"
        f" {sql_limits.timeout_s:g} s. Querying findings analyses every incident first (slow"
        " on a large archive)."
    )
    for name, tool in (
        ("list_incidents", list_incidents),
        ("analyze_incident", analyze_incident),
        ("explain_finding", explain),
        ("sql_query", sql_query),
    ):
        server.add_tool(
            tool,
            name=name,
            description=" ".join((tool.__doc__ or "").split()),
            annotations=ToolAnnotations(
                read_only_hint=True, idempotent_hint=True, open_world_hint=False
            ),
        )
    return server


@contextlib.contextmanager
def _no_logging_setup() -> Iterator[None]:
    """``MCPServer()`` calls ``logging.basicConfig``, which configures the root logger when
    it has no handler; the library never configures logging (the CLI does, before): a
    handler for the moment makes that call a no-op."""
    root = logging.getLogger()
    placeholder = logging.NullHandler()
    root.addHandler(placeholder)
    try:
        yield
    finally:
        root.removeHandler(placeholder)
