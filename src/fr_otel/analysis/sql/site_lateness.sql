-- Per group, call site (the op's hash where the entry has no stack) and rank: the rank's
-- lateness there, over the `arrival` table, with what is judged over all of a site's or
-- a group's rows: the site's typical member (the lower median of its members' medians, so
-- that two stragglers of four ranks do not pull it up to half their lateness), the
-- group's steps (its sites' most collectives) and its clock uncertainty (its least certain
-- member's). Only rows that may pass stragglers._late come back, ordered: a small share
-- of a large incident's rows, where building a Python object for every row would cost
-- more than the query. The bounds are loose by a rounding step; Python applies the exact
-- ones. Only the groups in `straggler_judged` are read ($every: all of them).
-- Read back by stragglers.site_lateness: the columns are SiteLateness's fields.
WITH units AS (
    SELECT *, coalesce(site, hash(op)) AS unit FROM arrival
    WHERE $every OR gid IN (SELECT gid FROM straggler_judged)
),
per_rank AS (
    SELECT gid, unit, any_value(op) AS op, rank,
           count(*) AS collectives,
           quantile_cont(lateness_ns, 0.5) AS p50_ns,
           count(*) FILTER (WHERE lateness_ns >= latest_ns) AS last,
           count(*) FILTER (WHERE lateness_ns > typical_ns) AS above,
           arg_max(record_id, lateness_ns) AS example_record,
           arg_max(collective_seq_id, lateness_ns) AS example_seq,
           any_value(basis) AS basis,
           coalesce(any_value(clock_offset_ns), 0) AS clock_offset_ns,
           any_value(clock_uncertainty_ns) AS clock_uncertainty_ns
    FROM units
    GROUP BY gid, unit, rank
),
judged AS (
    SELECT *,
           quantile_disc(p50_ns, 0.5) OVER (PARTITION BY gid, unit) AS peers_p50_ns,
           max(collectives) OVER (PARTITION BY gid) AS steps,
           max(clock_uncertainty_ns) OVER (PARTITION BY gid) AS group_uncertainty_ns
    FROM per_rank
)
SELECT *
FROM judged
WHERE collectives >= $min_collectives
  AND above >= $consistency * collectives - 0.5
  AND p50_ns - peers_p50_ns >= $min_excess_ns - 1
ORDER BY gid, unit, rank
