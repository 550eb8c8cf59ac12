-- One row per (group, collective sequence number, rank): a fingerprint of what that
-- rank issued there. A coalesced group is one slot holding several ops; its trailer is
-- left out.
CREATE OR REPLACE TEMP TABLE slots AS
-- most slots hold one op: those need no aggregation
SELECT gid, seq, rank, h AS sig, hd AS dsig, site, 1 AS n_ops, record_id AS first_record,
       time_created_ns AS created_ns, done, started
FROM e
WHERE NOT p2p AND op <> 'coalesced' AND NOT in_batch
UNION ALL
SELECT
    gid, seq, rank,
    hash(list(h ORDER BY record_id)) AS sig,
    hash(list(hd ORDER BY record_id)) AS dsig,
    -- the call site, so that a shifted rank is matched by op, sizes and where it was called
    arg_min(site, record_id) AS site,
    count(*) AS n_ops,
    min(record_id) AS first_record,
    min(time_created_ns) AS created_ns,
    bool_and(done) AS done,
    bool_or(started) AS started
FROM e
WHERE NOT p2p AND op <> 'coalesced' AND in_batch
GROUP BY gid, seq, rank;

-- The span of sequence numbers each rank's buffer holds for each of its groups.
CREATE OR REPLACE TEMP TABLE windows AS
SELECT gid, rank, min(seq) AS min_seq, max(seq) AS max_seq
FROM slots
GROUP BY gid, rank;

-- Per slot of a group: how many members issued it, with how many fingerprints, what
-- the majority's is, and how many members are absent although their buffer covers it.
CREATE OR REPLACE TEMP TABLE slot_summary AS
WITH per_slot AS (
    SELECT gid, seq, count(*) AS present, min(sig) AS low, max(sig) AS high
    FROM slots
    GROUP BY gid, seq
),
split AS (
    -- only slots whose members disagree need their fingerprints counted: counting them
    -- for every slot would be most of this statement
    SELECT gid, seq,
           count(*) AS signatures,
           arg_max(sig, n) AS majority_sig,
           max(n) AS majority_n,
           -- the second-highest count, to tell a tie (the top two, not a sorted list)
           max(n, 2)[2] AS runner_up_n
    FROM (
        SELECT gid, seq, sig, count(*) AS n
        FROM slots SEMI JOIN (SELECT gid, seq FROM per_slot WHERE low <> high) USING (gid, seq)
        GROUP BY gid, seq, sig
    )
    GROUP BY gid, seq
),
ranked AS (
    SELECT p.gid, p.seq, p.present,
           coalesce(d.signatures, 1) AS signatures,
           coalesce(d.majority_sig, p.low) AS majority_sig,
           coalesce(d.majority_n, p.present) AS majority_n,
           d.runner_up_n
    FROM per_slot p LEFT JOIN split d USING (gid, seq)
),
starts AS (
    -- where the buffers of a group's members begin (-1: holding their whole history),
    -- counted: members whose buffer reaches back to a slot cover it
    SELECT g.gid, coalesce(w.min_seq, -1) AS min_seq, count(*) AS n
    FROM groups g, unnest(g.members) AS m(rank)
    JOIN dumped d ON d.rank = m.rank
    LEFT JOIN windows w ON w.gid = g.gid AND w.rank = m.rank
    WHERE w.gid IS NOT NULL OR d.first_record = 0
    GROUP BY ALL
),
reach AS (
    SELECT gid, sum(n) AS covering, max(min_seq) AS all_from FROM starts GROUP BY gid
),
early AS (
    -- only slots before some member's buffer begins need counting (a join and a grouping
    -- of every slot would be a large part of this statement)
    SELECT r.gid, r.seq, sum(s.n) AS covering
    FROM ranked r
    JOIN reach h ON h.gid = r.gid AND r.seq < h.all_from
    JOIN starts s ON s.gid = r.gid AND s.min_seq <= r.seq
    GROUP BY r.gid, r.seq
)
SELECT r.gid, r.seq, r.present,
       CASE WHEN r.seq >= h.all_from THEN h.covering ELSE coalesce(c.covering, 0) END
           - r.present AS absent,
       r.signatures, r.majority_sig, r.majority_n, coalesce(r.runner_up_n, 0) AS runner_up_n
FROM ranked r LEFT JOIN reach h USING (gid) LEFT JOIN early c USING (gid, seq);

-- Members of a group that have no dump, or one without entries: unknown, never absent.
CREATE OR REPLACE TEMP TABLE silent_members AS
SELECT g.gid, list(m.rank ORDER BY m.rank) AS ranks
FROM groups g, unnest(g.members) AS m(rank)
WHERE m.rank NOT IN (SELECT rank FROM dumped)
GROUP BY g.gid;

-- gloo retires an op when it fails as well as when it completes: a rank
-- that dumped after its collective timed out or lost its peer shows it retired. A
-- collective cannot complete while a member whose buffer covers it never issued it, and
-- its retirement proves nothing while members issued different things there. At such a
-- slot, a rank's last collective in the group is where it was blocked, retired or not;
-- one it went past (a gather's sender, done before the root failed) did complete.
-- Nor does it prove anything in a group with a silent member for a rank's last collective
-- of all, still pending past its timeout when the dump was taken, that no other member
-- went past (a gather's or reduce's senders finish before its root): the dumps cannot
-- tell that it completed, and only the silent member could say.
CREATE OR REPLACE TEMP TABLE failed_gloo AS
SELECT s.gid, s.seq, s.rank
FROM slots s
JOIN windows w ON w.gid = s.gid AND w.rank = s.rank AND w.max_seq = s.seq
JOIN slot_summary ss ON ss.gid = s.gid AND ss.seq = s.seq
WHERE s.done AND (ss.absent > 0 OR ss.signatures > 1)
  AND EXISTS (SELECT 1 FROM e WHERE e.gid = s.gid AND e.seq = s.seq AND e.rank = s.rank
              AND e.gloo AND NOT e.p2p)
UNION
SELECT s.gid, s.seq, s.rank
FROM slots s
JOIN windows w ON w.gid = s.gid AND w.rank = s.rank AND w.max_seq = s.seq
JOIN silent_members sm ON sm.gid = s.gid
WHERE s.done
  AND EXISTS (
      SELECT 1 FROM e
      WHERE e.gid = s.gid AND e.seq = s.seq AND e.rank = s.rank AND NOT e.p2p
        AND e.op <> 'coalesced' AND e.retired_only
        AND (e.op IN ('gather', 'reduce')
             OR NOT EXISTS (SELECT 1 FROM windows o WHERE o.gid = s.gid AND o.max_seq > s.seq))
        AND e.record_id = (SELECT max(x.record_id) FROM e x
                           WHERE x.rank = s.rank AND NOT x.p2p AND x.op <> 'coalesced')
        AND (
            -- pending past its timeout when dumped
            e.dump_time_ns IS NULL OR e.time_created_ns IS NULL OR coalesce(e.timeout_ms, 0) = 0
            OR e.dump_time_ns - e.time_created_ns >= e.timeout_ms * 1000000)
  );

-- A rank whose last collective of all is such a retired gloo collective in a group with a
-- silent member, done before its timeout: it completed (and the rank stopped after it) or
-- it failed (and the rank waits on the silent member). Only the silent member could say.
CREATE OR REPLACE TEMP TABLE unsure_stops AS
SELECT e.rank, e.gid, e.seq, e.op, sm.ranks AS silent
FROM e
JOIN silent_members sm ON sm.gid = e.gid
WHERE NOT e.p2p AND e.op <> 'coalesced' AND e.retired_only
  AND e.record_id = (SELECT max(x.record_id) FROM e x
                     WHERE x.rank = e.rank AND NOT x.p2p AND x.op <> 'coalesced')
  -- a member that went past it shows it completed
  AND (e.op IN ('gather', 'reduce')
       OR NOT EXISTS (SELECT 1 FROM windows o WHERE o.gid = e.gid AND o.max_seq > e.seq))
  -- a member absent from it, or a disagreement there, shows it failed
  AND NOT EXISTS (SELECT 1 FROM slot_summary ss WHERE ss.gid = e.gid AND ss.seq = e.seq
                  AND (ss.absent > 0 OR ss.signatures > 1));

-- (their entries in e: failed_gloo_entries.sql, run by the engine where there are any)
UPDATE slots SET done = false
WHERE EXISTS (SELECT 1 FROM failed_gloo f
              WHERE f.gid = slots.gid AND f.seq = slots.seq AND f.rank = slots.rank);

-- gloo's worker thread completes a work's future, which lets the caller's wait() return,
-- a moment before it retires the work's entry: a rank that dumped at once (it went on to
-- its next collective and hung there) shows the blocking collective it had returned from
-- not retired, and would be said to wait in it. FR does not say which calls blocked (an
-- async_op=True one stays in flight while the next is issued), so going past a collective
-- is not enough; it counts as done when, besides, every member's part of it was given:
-- another member completed it (a member ends an all_reduce, an all_gather, an all_to_all,
-- a broadcast or a scatter only with every part it needs sent; not a gather's or a
-- reduce's senders, done before their root has everyone's), or every member issued it
-- alike, each with a dump. Then it holds this rank nowhere, returned already or not.
CREATE OR REPLACE TEMP TABLE unretired_gloo AS
WITH went_past AS (
    -- unfinished gloo collectives a rank issued something after: few, so read from e
    -- rather than found by joining every slot with its summary, a pass over all slots
    SELECT e.gid, e.seq, e.rank, e.op
    FROM e JOIN dumped d ON d.rank = e.rank AND d.last_record > e.record_id
    WHERE e.gloo AND NOT e.done AND NOT e.p2p AND NOT e.in_batch AND e.op <> 'coalesced'
)
SELECT w.gid, w.seq, w.rank
FROM went_past w
JOIN slot_summary ss ON ss.gid = w.gid AND ss.seq = w.seq
WHERE ss.absent = 0 AND ss.signatures = 1
  AND NOT EXISTS (SELECT 1 FROM failed_gloo f
                  WHERE f.gid = w.gid AND f.seq = w.seq AND f.rank = w.rank)
  AND ((w.op NOT IN ('gather', 'reduce')
        AND EXISTS (SELECT 1 FROM slots o
                    WHERE o.gid = w.gid AND o.seq = w.seq AND o.rank <> w.rank AND o.done))
       OR EXISTS (SELECT 1 FROM groups g
                  WHERE g.gid = w.gid AND g.unknown_members = 0 AND len(g.members) = ss.present
                    AND g.gid NOT IN (SELECT gid FROM silent_members)));

-- (their entries in e: unretired_gloo_entries.sql, run by the engine where there are any)
UPDATE slots SET done = true
WHERE EXISTS (SELECT 1 FROM unretired_gloo u
              WHERE u.gid = slots.gid AND u.seq = slots.seq AND u.rank = slots.rank);
