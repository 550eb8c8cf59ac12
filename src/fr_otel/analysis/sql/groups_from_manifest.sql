-- The incident's process groups, as its manifest (_incident.json) lists them.
-- gid: {gid}, as 01_entries.sql gives each row (sqlfiles.group_key).
CREATE OR REPLACE TEMP TABLE groups AS
SELECT {gid} AS gid, pg_name, pg_desc, list_sort(pg_ranks) AS members, inferred
FROM (SELECT unnest($names::VARCHAR[]) AS pg_name, unnest($descs::VARCHAR[]) AS pg_desc,
             unnest($ranks::BIGINT[][]) AS pg_ranks, unnest($inferred::BOOLEAN[]) AS inferred);
