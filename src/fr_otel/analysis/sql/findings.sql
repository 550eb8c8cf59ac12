-- fr-otel sql's `findings`: the findings of every incident, from the Arrow table
-- (findings.findings_table) registered as findings_rows.
CREATE OR REPLACE TEMP TABLE findings AS SELECT * FROM findings_rows
