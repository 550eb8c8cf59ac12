-- The arrival rows (stragglers.py): one per rank per completed collective, with its
-- lateness after the group's first member. Filled in by stragglers.py: `coll`, the CTE
-- of the collectives (arrival_coll_from_rows.sql or arrival_coll_from_entries.sql), and
-- `clock`, the clock offsets' CTEs (clock.sql).
WITH {coll},
slot AS (
    -- collectives every member completed
    SELECT gid, collective_seq_id, count(*) AS present, count(duration_ms) AS timed,
           max(duration_ms) AS longest, min(duration_ms) AS shortest,
           sum(duration_ms) AS total_duration,
           -- the members' mean completion (a double: 256 ns steps, plenty): a member whose
           -- completion was noticed late moves it, the median over collectives does not
           avg(time_completed_ns)::BIGINT AS completed_center,
           -- a time near the slot's, so that sums of its times stay small and exact
           avg(time_created_ns)::BIGINT AS reference_ns
    FROM coll
    GROUP BY gid, collective_seq_id
    HAVING count(*) = any_value(members) AND count(*) > 1
),
joined AS MATERIALIZED (
    SELECT c.*, s.* EXCLUDE (gid, collective_seq_id)
    FROM coll c JOIN slot s USING (gid, collective_seq_id)
),
{clock},
placed AS MATERIALIZED (
    SELECT j.*, coalesce(k.offset_ns, 0) AS clock_offset_ns,
           k.uncertainty_ns AS clock_uncertainty_ns,
           j.time_created_ns - coalesce(k.offset_ns, 0) AS arrival_ns,
           j.time_created_ns - coalesce(k.offset_ns, 0) - j.reference_ns AS relative_ns,
           j.timed = j.present AS gpu
    FROM joined j LEFT JOIN clock k USING (gid, rank)
),
arrived AS (
    -- per slot, over clock-corrected issue times (a grouping: far cheaper than a window)
    SELECT gid, collective_seq_id, min(relative_ns) AS first_ns, max(relative_ns) AS last_ns,
           sum(relative_ns) AS sum_ns
    FROM placed
    GROUP BY gid, collective_seq_id
),
windowed AS (
    SELECT p.*,
           p.relative_ns - a.first_ns AS issue_lateness_ns,
           CASE WHEN p.gpu THEN round((p.longest - p.duration_ms) * 1e6)::BIGINT END
               AS gpu_lateness_ns,
           -- the latest member's lateness, and the mean of the others' (stragglers.py)
           CASE WHEN p.gpu THEN (p.longest - p.shortest) * 1e6 ELSE a.last_ns - a.first_ns END
               AS latest_ns,
           CASE WHEN p.gpu
                THEN ((p.present - 1) * p.longest - p.total_duration + p.shortest) * 1e6
                     / (p.present - 1)
                ELSE (a.sum_ns - a.last_ns) / (p.present - 1) - a.first_ns END AS typical_ns
    FROM placed p JOIN arrived a USING (gid, collective_seq_id)
)
SELECT * EXCLUDE (relative_ns, reference_ns, gpu),
       coalesce(gpu_lateness_ns, issue_lateness_ns) AS lateness_ns,
       CASE WHEN gpu THEN 'gpu_start' ELSE 'issue' END AS basis
FROM windowed
