"""Cross-rank analysis over the canonical table on DuckDB (not built yet)."""
