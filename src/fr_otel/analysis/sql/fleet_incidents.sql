-- fleet_incidents: one row per incident of the archive, with its verdict.
-- Columns: job, incident, verdict (the root cause's kind, else the first finding's;
-- healthy without findings), summary (the root cause's), culprit_ranks and culprit_hosts
-- (comma-separated), straggler_ranks, ranks (ranks with rows or named), hosts (distinct
-- hosts), world_size, time_ns (the incident's latest dump or entry time, ns since the
-- epoch), day (UTC, YYYY-MM-DD).
-- Written for DuckDB and Spark SQL alike: standard aggregates only.
SELECT
    job,
    incident,
    MAX(verdict) AS verdict,
    MAX(summary) AS summary,
    MAX(culprit_ranks) AS culprit_ranks,
    MAX(culprit_hosts) AS culprit_hosts,
    MAX(straggler_ranks) AS straggler_ranks,
    COUNT(*) AS ranks,
    COUNT(DISTINCT host) AS hosts,
    MAX(world_size) AS world_size,
    MAX(incident_time_ns) AS time_ns,
    MAX(incident_day) AS day
FROM fleet_roles
GROUP BY job, incident
