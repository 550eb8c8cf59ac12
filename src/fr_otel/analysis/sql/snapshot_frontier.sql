-- A snapshot read up to each group's frontier (snapshots.read_snapshot): the last
-- collective every member with a dump had issued.
CREATE OR REPLACE TEMP TABLE snapshot_frontier AS
SELECT g.gid, min(coalesce(w.max_seq, -1)) AS frontier
FROM groups g, unnest(g.members) AS m(rank)
JOIN dumped d ON d.rank = m.rank
LEFT JOIN (SELECT gid, rank, max(seq) AS max_seq FROM e
           WHERE NOT p2p AND op <> 'coalesced' GROUP BY gid, rank) w
    ON w.gid = g.gid AND w.rank = m.rank
-- a member whose buffer no longer reaches this group tells nothing about its frontier
WHERE w.max_seq IS NOT NULL OR d.first_record = 0
GROUP BY g.gid;

-- set aside: collectives past the frontier, point-to-point ops still waiting for their peer
DELETE FROM e
WHERE (p2p AND NOT done)
   OR (NOT p2p AND seq > (SELECT f.frontier FROM snapshot_frontier f WHERE f.gid = e.gid));

-- what is left was in progress when the snapshot was taken, never stuck
UPDATE e SET done = true WHERE NOT done;
