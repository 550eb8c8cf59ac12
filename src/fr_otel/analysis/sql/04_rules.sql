-- Shape rules each entry must satisfy on its own, whatever its peers did.
-- Joins take each group's size, never its member list: joined, the list is copied into
-- every row (at 8,192 ranks, the default group's 8,192 members into millions of rows,
-- seconds of CPU in all_to_all_balance). MATERIALIZED: else DuckDB moves len() above the join.
CREATE OR REPLACE TEMP TABLE rule_violations AS
WITH sizes AS MATERIALIZED (SELECT gid, len(members) AS size, unknown_members FROM groups)
SELECT
    e.rank, e.gid, e.seq, e.op, e.record_id, g.size AS group_size, e.in_numel,
    e.out_numel,
    CASE
        WHEN list_contains($all_gather_ops, e.op) THEN 'output numel must be input numel x group size'
        WHEN list_contains($reduce_scatter_ops, e.op) THEN 'input numel must be output numel x group size'
        ELSE 'input and output sizes must be equal'
    END AS rule
FROM e JOIN sizes g USING (gid)
WHERE NOT e.p2p AND e.in_tensors > 0 AND e.out_tensors > 0
  AND (
      -- a group with members no dump shows (gloo, see members.py) has no size to check
      (list_contains($all_gather_ops, e.op) AND g.unknown_members = 0
       AND e.out_numel <> e.in_numel * g.size
       -- gloo's all_gather_into_tensor_coalesced, which functional collectives use, records
       -- only the first member's chunk of each output: as many elements as the input
       AND NOT (e.gloo AND e.out_numel = e.in_numel))
      OR (list_contains($reduce_scatter_ops, e.op) AND g.unknown_members = 0
          AND e.in_numel <> e.out_numel * g.size)
      -- gloo runs reduce_scatter_tensor as an all_reduce over the whole input
      OR (list_contains($all_reduce_ops, e.op) AND NOT e.gloo AND NOT e.sizes_equal)
  );

-- all_to_all moves every element somewhere: over the whole group, what goes in comes out.
-- Members without a dump leave the totals unknown: where the members with one are still
-- in it (it never completed, so the totals may not have balanced), the slot is kept with
-- those silent members, and rules.py weighs it taking them to have moved what most members
-- with a dump did.
CREATE OR REPLACE TEMP TABLE all_to_all_balance AS
WITH sizes AS MATERIALIZED (SELECT gid, len(members) AS size FROM groups),
a2a AS (
    SELECT gid, seq, rank, record_id, in_numel, out_numel, done
    FROM e
    WHERE list_contains($all_to_all_ops, op) AND NOT p2p
),
complete AS (
    SELECT a.gid, a.seq
    FROM a2a a JOIN sizes g USING (gid) LEFT JOIN silent_members sm USING (gid)
    GROUP BY a.gid, a.seq
    -- the balanced ones, nearly all, are dropped before their per-rank lists are built
    HAVING (count(DISTINCT a.rank) = any_value(g.size)
            AND sum(a.in_numel) <> sum(a.out_numel))
        OR (count(DISTINCT a.rank) + len(any_value(sm.ranks)) = any_value(g.size)
            AND NOT bool_and(a.done))
)
SELECT a.gid, a.seq,
       list(struct_pack(rank := a.rank, record_id := a.record_id, i := a.in_numel,
                        o := a.out_numel) ORDER BY a.rank) AS per_rank,
       sum(a.in_numel) AS total_in, sum(a.out_numel) AS total_out,
       coalesce(any_value(sm.ranks), []) AS silent
FROM a2a a JOIN complete USING (gid, seq) LEFT JOIN silent_members sm USING (gid)
GROUP BY a.gid, a.seq;

-- Point-to-point ops still waiting, with whether the peer posted the other half.
CREATE OR REPLACE TEMP TABLE p2p_pending AS
SELECT
    s.rank, s.gid, s.op, s.peer, s.p2p_seq_id, s.record_id, s.time_created_ns,
    EXISTS (
        SELECT 1 FROM e r
        WHERE r.gid = s.gid AND r.rank = s.peer AND r.peer = s.rank AND r.p2p
          AND NOT r.done AND r.op = CASE s.op WHEN 'send' THEN 'recv' ELSE 'send' END
    ) AS peer_posted,
    s.peer IN (SELECT rank FROM dumped) AS peer_dumped
FROM e s
WHERE s.p2p AND NOT s.done AND s.op IN ('send', 'recv') AND s.peer IS NOT NULL;
