-- fleet_bad_nodes: every host of fleet_hosts, scored against the rest of the fleet.
-- Columns: host, incidents, blamed, culprit, straggler, rate (blamed / incidents),
-- base_rate (the rest of the fleet's blamed share, Laplace-smoothed:
-- (fleet blamed - blamed + 1) / (fleet incidents - incidents + 2)), excess (rate -
-- base_rate), z (the score statistic of a one-sided binomial test of rate > base_rate),
-- confidence (the normal distribution's CDF at z: how sure the test is that the host's
-- rate is above the rest's), bad_node (at least 2 incidents, 2 of them blamed, and
-- z >= 3.090232, a one-sided 99.9% confidence), evidence (fleet_hosts').
-- Order by z DESC for the ranking. docs/fleet.md says why this statistic.
-- Written for DuckDB and Spark SQL alike: window aggregates, CASE, SQRT, EXP, ABS.
WITH fleet AS (
    SELECT
        host,
        incidents,
        blamed,
        culprit,
        straggler,
        evidence,
        CAST(SUM(incidents) OVER () AS BIGINT) AS fleet_incidents,
        CAST(SUM(blamed) OVER () AS BIGINT) AS fleet_blamed
    FROM fleet_hosts
),
rated AS (
    SELECT
        *,
        CAST(blamed AS DOUBLE) / incidents AS rate,
        (CAST(fleet_blamed - blamed AS DOUBLE) + 1.0)
            / (CAST(fleet_incidents - incidents AS DOUBLE) + 2.0) AS base_rate
    FROM fleet
),
scored AS (
    SELECT
        *,
        (blamed - incidents * base_rate)
            / SQRT(incidents * base_rate * (1.0 - base_rate)) AS z
    FROM rated
),
tailed AS (
    -- the normal distribution's upper tail at |z| (Zelen and Severo, error below 1e-7)
    SELECT
        *,
        EXP(-0.5 * z * z) / 2.5066282746310002
        * (
            0.319381530 * (1.0 / (1.0 + 0.2316419 * ABS(z)))
            - 0.356563782 * POWER(1.0 / (1.0 + 0.2316419 * ABS(z)), 2)
            + 1.781477937 * POWER(1.0 / (1.0 + 0.2316419 * ABS(z)), 3)
            - 1.821255978 * POWER(1.0 / (1.0 + 0.2316419 * ABS(z)), 4)
            + 1.330274429 * POWER(1.0 / (1.0 + 0.2316419 * ABS(z)), 5)
        ) AS tail
    FROM scored
)
SELECT
    host,
    incidents,
    blamed,
    culprit,
    straggler,
    rate,
    base_rate,
    rate - base_rate AS excess,
    z,
    CASE WHEN z >= 0 THEN 1.0 - tail ELSE tail END AS confidence,
    incidents >= 2 AND blamed >= 2 AND z >= 3.090232 AS bad_node,
    evidence
FROM tailed
