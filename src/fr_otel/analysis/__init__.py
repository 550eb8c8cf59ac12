"""Cross-rank analysis over the canonical table on DuckDB.

``analyze(path)`` returns an ``Analysis``: findings (kind, group, sequence number, culprit
ranks, evidence, stacks), the root cause among them, and the ranks whose dumps are
missing. ``open_session(path)`` opens an incident for analysis and hands out the relations
the analysis made (``Session``). Rendering is the caller's job (the CLI renders text and
JSON, the report HTML).

The names below load their modules on first use: an analysis of dumps loads DuckDB and
the passes while the import's workers convert the dumps (``source.open_source``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fr_otel.analysis.engine import analyze_connection
    from fr_otel.analysis.findings import KINDS, Analysis, Finding, GroupRef
    from fr_otel.analysis.session import Session, analyze, open_session
    from fr_otel.analysis.source import Source, open_source

_HOMES = {
    "analyze_connection": "engine",
    "KINDS": "findings",
    "Analysis": "findings",
    "Finding": "findings",
    "GroupRef": "findings",
    "Session": "session",
    "analyze": "session",
    "open_session": "session",
    "Source": "source",
    "open_source": "source",
}

__all__ = [
    "KINDS",
    "Analysis",
    "Finding",
    "GroupRef",
    "Session",
    "Source",
    "analyze",
    "analyze_connection",
    "open_session",
    "open_source",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
