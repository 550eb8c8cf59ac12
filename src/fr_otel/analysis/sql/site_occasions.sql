-- Per (group, call site, rank) of `occasion_wanted` (the sites of the ranks the straggler
-- analysis would name, stragglers.site_occasions fills it in): the rank's separate occasions
-- there, and those where it was late, over the `arrival` table. A site's collectives
-- close together (a burst, as FSDP's all-gathers of one step's layers) share whatever held
-- a rank up then, and count once: a gap of at least $burst_factor times the site's median
-- gap between its collectives ends a burst, where at least 1/$max_burst of the gaps are
-- that long (rarer long gaps are pauses between single calls, as a checkpoint's);
-- elsewhere every collective is an occasion of its own. A rank is late at an occasion when
-- it was later than the typical member at most of its collectives.
WITH units AS (
    SELECT *, coalesce(site, hash(op)) AS unit FROM arrival
    WHERE gid IN (SELECT gid FROM occasion_wanted)
),
called AS (
    -- when each collective of a site began: its first member's arrival
    SELECT gid, unit, collective_seq_id, min(arrival_ns) AS began_ns
    FROM units
    WHERE (gid, unit) IN (SELECT gid, unit FROM occasion_wanted)
    GROUP BY gid, unit, collective_seq_id
),
gapped AS MATERIALIZED (
    SELECT *,
           began_ns - lag(began_ns) OVER (PARTITION BY gid, unit ORDER BY collective_seq_id)
               AS gap_ns
    FROM called
),
medians AS (
    SELECT gid, unit, $burst_factor * quantile_cont(gap_ns, 0.5) AS split_ns,
           count(gap_ns) AS gaps
    FROM gapped
    GROUP BY gid, unit
),
split AS (
    SELECT m.gid, m.unit, any_value(m.split_ns) AS split_ns
    FROM medians m JOIN gapped g USING (gid, unit)
    WHERE g.gap_ns >= m.split_ns
    GROUP BY m.gid, m.unit
    HAVING count(*) * $max_burst >= any_value(m.gaps)
),
occasions AS (
    SELECT g.gid, g.unit, g.collective_seq_id,
           sum(CASE WHEN g.gap_ns IS NULL OR g.gap_ns >= coalesce(s.split_ns, 0) THEN 1
                    ELSE 0 END)
               OVER (PARTITION BY g.gid, g.unit ORDER BY g.collective_seq_id) AS occasion
    FROM gapped g LEFT JOIN split s USING (gid, unit)
),
per_occasion AS (
    SELECT u.gid, u.unit, u.rank,
           2 * count(*) FILTER (WHERE u.lateness_ns > u.typical_ns) > count(*) AS late
    FROM units u JOIN occasions o USING (gid, unit, collective_seq_id)
    WHERE (u.gid, u.unit, u.rank) IN (SELECT gid, unit, rank FROM occasion_wanted)
    GROUP BY u.gid, u.unit, u.rank, o.occasion
)
SELECT gid, unit, rank, count(*) AS occasions, count(*) FILTER (WHERE late) AS late_occasions
FROM per_occasion
GROUP BY gid, unit, rank
