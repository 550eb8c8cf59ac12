-- The incident's process groups, from its rows (no manifest): one per name and rank set.
-- gid: a hash of the name alone where names identify groups, else of name and ranks.
CREATE OR REPLACE TEMP TABLE groups AS
SELECT CASE WHEN $gid_by_name THEN hash(pg_name) ELSE hash(pg_name, pg_ranks) END AS gid,
       any_value(pg_name) AS pg_name, any_value(pg_desc) AS pg_desc,
       list_sort(any_value(pg_ranks)) AS members,
       bool_or(coalesce(pg_ranks_inferred, false)) AS inferred
FROM src
WHERE job = $job AND incident = $incident
GROUP BY pg_name, pg_ranks;
