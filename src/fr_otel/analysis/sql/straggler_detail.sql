-- For the sites in `wanted` (straggler_sites.sql), per rank: the p90 of its lateness, the
-- median of its issue-time lateness, and the time its collectives lost to it (how much
-- earlier each collective where it was latest would have run without it).
WITH a AS (
    SELECT gid, coalesce(site, hash(op)) AS unit, collective_seq_id, rank, lateness_ns,
           issue_lateness_ns
    FROM arrival WHERE gid IN (SELECT DISTINCT gid FROM wanted)
),
s AS (
    SELECT gid, collective_seq_id, max(lateness_ns) AS top, max(lateness_ns, 2)[2] AS runner_up
    FROM a GROUP BY gid, collective_seq_id
)
SELECT a.gid, a.unit, a.rank, quantile_cont(a.lateness_ns, 0.9),
       quantile_cont(a.issue_lateness_ns, 0.5),
       coalesce(sum(CASE WHEN a.lateness_ns = s.top THEN s.top - s.runner_up END), 0)
FROM a SEMI JOIN (SELECT DISTINCT gid, unit FROM wanted) w USING (gid, unit)
JOIN s USING (gid, collective_seq_id)
GROUP BY a.gid, a.unit, a.rank
