"""Cross-rank analysis over the canonical table on DuckDB.

``analyze(path)`` returns an ``Analysis``: findings (kind, group, sequence number, culprit
ranks, evidence, stacks), the root cause among them, and the ranks whose dumps are
missing. Rendering it is the caller's job (the CLI renders text and JSON).
"""

from fr_otel.analysis.engine import analyze, analyze_connection
from fr_otel.analysis.findings import KINDS, Analysis, Finding, GroupRef
from fr_otel.analysis.source import Source, open_source

__all__ = [
    "KINDS",
    "Analysis",
    "Finding",
    "GroupRef",
    "Source",
    "analyze",
    "analyze_connection",
    "open_source",
]
