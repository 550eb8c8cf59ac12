-- The incident's process groups, as its manifest (_incident.json) lists them.
-- gid: a hash of the name alone where names identify groups, else of name and ranks.
CREATE OR REPLACE TEMP TABLE groups AS
SELECT CASE WHEN $gid_by_name THEN hash(name) ELSE hash(name, ranks) END AS gid,
       name AS pg_name, descr AS pg_desc, list_sort(ranks) AS members, inferred
FROM (SELECT unnest($names::VARCHAR[]) AS name, unnest($descs::VARCHAR[]) AS descr,
             unnest($ranks::BIGINT[][]) AS ranks, unnest($inferred::BOOLEAN[]) AS inferred);
