"""Cross-rank analysis over the canonical table on DuckDB.

``analyze(path)`` returns an ``Analysis``: findings (kind, group, sequence number, culprit
ranks, evidence, stacks), the root cause among them, and the ranks whose dumps are
missing. ``open_session(path)`` opens an incident for analysis and hands out the relations
the analysis made (``Session``). Rendering is the caller's job (the CLI renders text and
JSON, the report HTML).
"""

from fr_otel.analysis.engine import analyze_connection
from fr_otel.analysis.findings import KINDS, Analysis, Finding, GroupRef
from fr_otel.analysis.session import Session, analyze, open_session
from fr_otel.analysis.source import Source, open_source

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
