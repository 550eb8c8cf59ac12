-- Per group, call site (the op's hash where the entry has no stack) and rank: the rank's
-- lateness there, over the `arrival` table. Read back by stragglers.site_lateness: the
-- columns are SiteLateness's fields.
SELECT gid, coalesce(site, hash(op)) AS unit, any_value(op) AS op, rank,
       count(*) AS collectives,
       quantile_cont(lateness_ns, 0.5) AS p50_ns,
       count(*) FILTER (WHERE lateness_ns >= latest_ns) AS last,
       count(*) FILTER (WHERE lateness_ns > typical_ns) AS above,
       arg_max(record_id, lateness_ns) AS example_record,
       arg_max(collective_seq_id, lateness_ns) AS example_seq,
       any_value(basis) AS basis,
       coalesce(any_value(clock_offset_ns), 0) AS clock_offset_ns,
       any_value(clock_uncertainty_ns) AS clock_uncertainty_ns
FROM arrival
GROUP BY gid, unit, rank
