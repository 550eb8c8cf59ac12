"""What agents are offered over an archive: the MCP server of ``fr-otel mcp`` (``server``),
the incidents named exactly and analysed as ``fr-otel analyze`` does (``incidents``), a
finding explained (``explain``), and SQL run read-only and locked down (``readonly_sql``).
Only ``server`` needs the ``mcp`` package."""
