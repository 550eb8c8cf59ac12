-- Shape rules each entry must satisfy on its own, whatever its peers did.
CREATE OR REPLACE TEMP TABLE rule_violations AS
WITH sized AS (
    SELECT
        e.rank, e.gkey, e.seq, e.op, e.input_sizes, e.output_sizes,
        len(g.members) AS group_size,
        list_sum(list_transform(e.input_sizes, lambda s: list_product(s)))::BIGINT AS in_numel,
        list_sum(list_transform(e.output_sizes, lambda s: list_product(s)))::BIGINT AS out_numel,
        e.backend
    FROM e JOIN groups g USING (gkey)
    WHERE NOT e.p2p AND len(e.input_sizes) > 0 AND len(e.output_sizes) > 0
)
SELECT rank, gkey, seq, op, input_sizes, output_sizes, group_size, in_numel, out_numel,
       CASE
           WHEN list_contains($all_gather_ops, op) THEN 'output numel must be input numel x group size'
           WHEN list_contains($reduce_scatter_ops, op) THEN 'input numel must be output numel x group size'
           ELSE 'input and output sizes must be equal'
       END AS rule
FROM sized
WHERE (list_contains($all_gather_ops, op) AND out_numel <> in_numel * group_size)
   OR (list_contains($reduce_scatter_ops, op) AND in_numel <> out_numel * group_size)
   -- gloo runs reduce_scatter_tensor as an all_reduce over the whole input
   OR (list_contains($all_reduce_ops, op) AND backend <> 'gloo' AND input_sizes <> output_sizes);

-- all_to_all moves every element somewhere: over the whole group, what goes in comes out.
CREATE OR REPLACE TEMP TABLE all_to_all_balance AS
WITH a2a AS (
    SELECT gkey, seq, rank,
           list_sum(list_transform(input_sizes, lambda s: list_product(s)))::BIGINT AS in_numel,
           list_sum(list_transform(output_sizes, lambda s: list_product(s)))::BIGINT AS out_numel
    FROM e
    WHERE list_contains($all_to_all_ops, op) AND NOT p2p
),
complete AS (
    SELECT a.gkey, a.seq
    FROM a2a a JOIN groups g USING (gkey)
    GROUP BY a.gkey, a.seq
    HAVING count(DISTINCT a.rank) = any_value(len(g.members))
)
SELECT a.gkey, a.seq, list(struct_pack(rank := a.rank, i := a.in_numel, o := a.out_numel)
                           ORDER BY a.rank) AS per_rank,
       sum(a.in_numel) AS total_in, sum(a.out_numel) AS total_out
FROM a2a a JOIN complete USING (gkey, seq)
GROUP BY a.gkey, a.seq
HAVING sum(a.in_numel) <> sum(a.out_numel);

-- Point-to-point ops still waiting, with whether the peer posted the other half.
CREATE OR REPLACE TEMP TABLE p2p_pending AS
SELECT
    s.rank, s.gkey, s.op, s.peer, s.p2p_seq_id, s.record_id, s.input_sizes, s.output_sizes,
    s.time_created_ns, s.frames,
    EXISTS (
        SELECT 1 FROM e r
        WHERE r.gkey = s.gkey AND r.rank = s.peer AND r.peer = s.rank AND r.p2p
          AND NOT r.done AND r.op = CASE s.op WHEN 'send' THEN 'recv' ELSE 'send' END
    ) AS peer_posted,
    s.peer IN (SELECT rank FROM dumped) AS peer_dumped
FROM e s
WHERE s.p2p AND NOT s.done AND s.op IN ('send', 'recv') AND s.peer IS NOT NULL;
