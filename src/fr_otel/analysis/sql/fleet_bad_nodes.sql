-- fleet_bad_nodes: every host of fleet_hosts, tested against the rest of the fleet.
-- Columns: host, incidents, blamed, culprit, straggler, rate (blamed / incidents),
-- base_rate (the rest of the fleet's blamed share, Laplace-smoothed:
-- (fleet blamed - blamed + 1) / (fleet incidents - incidents + 2)), excess (rate -
-- base_rate), z (the score statistic (blamed - incidents * base_rate) /
-- SQRT(incidents * base_rate * (1 - base_rate)), for reading only: the normal
-- approximation flatters small counts), p_bound (the Chernoff-Hoeffding bound
-- EXP(-incidents * KL(rate || base_rate)) on the chance that a healthy host, blamed at
-- base_rate, is blamed this often or more: never below the exact binomial tail, equal to
-- it where every incident blamed the host; 1 where rate <= base_rate), confidence
-- (1 - min(1, p_bound * hosts), hosts being fleet_hosts' rows: how sure the fleet-wide
-- test is that the host is not a healthy one among hosts blamed this often by chance),
-- bad_node (at least 2 incidents, 2 of them blamed, and p_bound <= alpha / hosts, the
-- Bonferroni correction: a fleet of healthy hosts names any with probability at most
-- alpha; alpha is fleet/views.py's BAD_NODE_ALPHA, which views.view_sql writes in),
-- evidence (fleet_hosts').
-- Order by p_bound, then z DESC, for the ranking. docs/fleet.md says why this statistic.
-- Written for DuckDB and Spark SQL alike: window aggregates, CASE, CAST, SQRT, LN, EXP.
WITH fleet AS (
    SELECT
        host,
        incidents,
        blamed,
        culprit,
        straggler,
        evidence,
        CAST(SUM(incidents) OVER () AS BIGINT) AS fleet_incidents,
        CAST(SUM(blamed) OVER () AS BIGINT) AS fleet_blamed,
        CAST(COUNT(*) OVER () AS BIGINT) AS hosts
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
    -- incidents * KL(rate || base_rate), where rate > base_rate (so blamed > 0); the
    -- unblamed incidents' term is 0 where there are none (0 * LN 0 = 0)
    SELECT
        *,
        (blamed - incidents * base_rate)
            / SQRT(incidents * base_rate * (1.0 - base_rate)) AS z,
        CASE
            WHEN rate > base_rate THEN
                blamed * LN(rate / base_rate)
                + (incidents - blamed) * LN(
                    CASE
                        WHEN blamed < incidents THEN (1.0 - rate) / (1.0 - base_rate)
                        ELSE 1.0
                    END
                )
        END AS divergence
    FROM rated
),
bounded AS (
    SELECT
        *,
        CASE WHEN rate > base_rate THEN EXP(-divergence) ELSE 1.0 END AS p_bound
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
    p_bound,
    CASE WHEN p_bound * hosts < 1.0 THEN 1.0 - p_bound * hosts ELSE 0.0 END AS confidence,
    incidents >= 2 AND blamed >= 2 AND p_bound <= CAST({bad_node_alpha} AS DOUBLE) / hosts AS bad_node,
    evidence
FROM bounded
