"""The report's bounds, importable without the analysis stack (the CLI's option defaults)."""

DEFAULT_COLUMNS = 200
"""Schedule positions shown: enough to see a desync's lead-up; bounded so that a
100,000-rank report stays a file a browser opens."""

DEFAULT_MAX_RANKS = 2048
"""Ranks shown: past this, the ranks the findings name and an even sample of the others
(a 100,000-rank grid would be a page no browser opens)."""
