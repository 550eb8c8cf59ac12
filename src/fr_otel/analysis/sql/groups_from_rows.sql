-- The incident's process groups, from its rows (no manifest): one per name and rank set.
-- gid: {gid}, as 01_entries.sql gives each row (sqlfiles.group_key: without a manifest,
-- of name and ranks).
CREATE OR REPLACE TEMP TABLE groups AS
SELECT {gid} AS gid,
       any_value(pg_name) AS pg_name, any_value(pg_desc) AS pg_desc,
       list_sort(any_value(pg_ranks)) AS members,
       bool_or(coalesce(pg_ranks_inferred, false)) AS inferred
FROM src
WHERE job = $job AND incident = $incident
GROUP BY pg_name, pg_ranks;
