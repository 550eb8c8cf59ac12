-- The collectives the arrival rows are made of, for the incident under analysis: the
-- CTE `coll` of arrival.sql over its `e`, `groups` and `windows` tables, each group's
-- last `window_slots` collectives (stragglers.WINDOW_SLOTS), of the groups `{groups}`
-- selects (`true`: every group).
-- each group's size, not its member list: joined, the list is copied into every row
-- (04_rules.sql); MATERIALIZED, else DuckDB moves len() above the join
group_sizes AS MATERIALIZED (SELECT gid, len(members) AS size FROM groups),
coll AS MATERIALIZED (
    -- the analyzer's own entries table (01_entries.sql): read once, already reduced; each
    -- group's last WINDOW_SLOTS collectives
    SELECT c.rank, c.gid, w.members, c.seq AS collective_seq_id, c.op, c.record_id, c.site,
           c.time_created_ns, CASE WHEN c.gloo THEN c.time_completed_ns END AS time_completed_ns,
           c.duration_ms
    FROM (
        SELECT * FROM e
        WHERE NOT p2p AND done AND NOT in_batch AND op <> 'coalesced' AND {groups}
    ) c
    JOIN (
        SELECT gid, max(max_seq) - {window_slots} AS after_seq, any_value(g.size) AS members
        FROM windows JOIN group_sizes g USING (gid)
        WHERE {groups}
        GROUP BY gid
    ) w USING (gid)
    WHERE c.seq > w.after_seq
)
