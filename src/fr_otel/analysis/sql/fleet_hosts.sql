-- fleet_hosts: one row per host, over every incident it took part in.
-- Columns: host, incidents (incidents with at least one of its ranks), culprit, straggler
-- (incidents in which one of its ranks was named so), waiting (incidents in which one of
-- its ranks waited behind the cause and none was blamed), blamed (incidents in which
-- it was culprit or straggler), ranks (rank rows, all incidents), first_seen_ns,
-- last_seen_ns, evidence (the latest incident that blamed it: job/incident: the finding's
-- summary), last_blamed_ns.
-- Written for DuckDB and Spark SQL alike: CASE, standard aggregates, a window function.
WITH per_incident AS (
    SELECT
        host,
        job,
        incident,
        MAX(CASE WHEN culprit THEN 1 ELSE 0 END) AS culprit,
        MAX(CASE WHEN straggler THEN 1 ELSE 0 END) AS straggler,
        MAX(CASE WHEN waiting THEN 1 ELSE 0 END) AS waiting,
        MAX(CASE WHEN culprit OR straggler THEN 1 ELSE 0 END) AS blamed,
        MAX(evidence) AS evidence,
        MAX(incident_time_ns) AS time_ns,
        COUNT(*) AS ranks
    FROM fleet_roles
    WHERE host IS NOT NULL
    GROUP BY host, job, incident
),
picked AS (
    SELECT
        *,
        ROW_NUMBER() OVER (
            PARTITION BY host ORDER BY blamed DESC, time_ns DESC, job, incident
        ) AS latest
    FROM per_incident
)
SELECT
    host,
    COUNT(*) AS incidents,
    CAST(SUM(culprit) AS BIGINT) AS culprit,
    CAST(SUM(straggler) AS BIGINT) AS straggler,
    CAST(SUM(CASE WHEN waiting = 1 AND blamed = 0 THEN 1 ELSE 0 END) AS BIGINT) AS waiting,
    CAST(SUM(blamed) AS BIGINT) AS blamed,
    CAST(SUM(ranks) AS BIGINT) AS ranks,
    MIN(time_ns) AS first_seen_ns,
    MAX(time_ns) AS last_seen_ns,
    MAX(
        CASE
            WHEN latest = 1 AND blamed = 1
                THEN CONCAT(job, '/', incident, ': ', COALESCE(evidence, ''))
        END
    ) AS evidence,
    MAX(CASE WHEN latest = 1 AND blamed = 1 THEN time_ns END) AS last_blamed_ns
FROM picked
GROUP BY host
