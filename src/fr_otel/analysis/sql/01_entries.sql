-- One incident's entries with what matching needs: the group identity (name and
-- global rank set, never the rank-local pg_id) as an integer, p2p-ness, and whether the
-- work finished. Sizes, dtypes and call sites are reduced to hashes and element counts
-- (copying them would cost more than all the matching); stacks stay in the archive.
-- Findings fetch the text of the few entries they show.
--
-- The rows are copied once: no intermediate copy of every entry (a CTE that two readers
-- share is one, and costs time and memory for every row); a batch's completion is set on
-- its few rows afterwards.
CREATE OR REPLACE TEMP TABLE e AS
SELECT * EXCLUDE (done_self), done_self AS done, false AS in_batch
FROM (
    SELECT
        rank, record_id, collective_seq_id AS seq, p2p_seq_id, op, peer, time_created_ns,
        timeout_ms, dump_time_ns,
        -- arrival lateness and clock offsets (stragglers.py, clocks.py)
        time_completed_ns, duration_ms,
        backend = 'gloo' AS gloo, state = 'started' AS state_started,
        -- group names are unique within an incident unless replicas reuse them (torchft):
        -- then the rank set must be hashed too, which costs more with every rank. Python
        -- writes in which (sqlfiles.group_key): a CASE on a parameter would make the scan
        -- read every row's member list even where names suffice
        {gid} AS gid,
        -- the user's call site, as a hash: findings fetch the text of the few they show
        CASE WHEN call_site IS NOT NULL THEN hash(call_site) END AS site,
        -- the fingerprint that must agree across a group; ops whose sizes legitimately
        -- differ across ranks (all_to_all, gather, scatter) leave sizes out of it. Each
        -- branch yields a hash, never a list: a CASE over lists copies every row's list,
        -- and hashing hd reads no dtype list twice
        CASE WHEN variable_size THEN hash(op, NULL, NULL, hd)
             ELSE hash(op, input_sizes, output_sizes, hd) END AS h,
        hd,
        -- most collectives move one tensor: its product needs no lambda
        CASE WHEN len(input_sizes) = 1 THEN list_product(input_sizes[1])::BIGINT
             ELSE list_sum(list_transform(input_sizes, lambda s: list_product(s)))::BIGINT
             END AS in_numel,
        CASE WHEN len(output_sizes) = 1 THEN list_product(output_sizes[1])::BIGINT
             ELSE list_sum(list_transform(output_sizes, lambda s: list_product(s)))::BIGINT
             END AS out_numel,
        len(input_sizes) AS in_tensors,
        len(output_sizes) AS out_tensors,
        input_sizes = output_sizes AS sizes_equal,
        entry_p2p(is_p2p, op) AS p2p,
        -- gloo never marks entries started/completed: retirement is its only completion signal.
        -- For NCCL a retired entry that did not complete timed out.
        entry_done(state, backend, retired) AS done_self,
        -- done only by gloo's retirement, which a failed collective gets too
        backend = 'gloo' AND coalesce(retired, false) AND state IS DISTINCT FROM 'completed'
            AS retired_only,
        state IN ('started', 'completed') AS started
    FROM (
        SELECT *,
            -- scatter's input list exists only on its source, gather's output list only on
            -- its destination: their other ranks record no tensor and so no dtype. Those ops
            -- compare the set of dtypes they moved, whichever side recorded them.
            CASE WHEN variable_size
                 THEN hash(list_sort(list_distinct(list_concat(input_dtypes, output_dtypes))),
                           NULL)
                 ELSE hash(input_dtypes, output_dtypes) END AS hd
        FROM (
            SELECT *, list_contains($variable_size_ops, op) AS variable_size
            FROM {rows}
            WHERE job = $job AND incident = $incident
        )
    )
);

-- ops inside a coalesced batch never complete themselves (pytorch#137969): the batch's
-- trailing `coalesced` entry carries the completion for all of them (`done` is still each
-- entry's own here)
UPDATE e SET done = e.done OR coalesce(fb.finished, false), in_batch = true
FROM (
    SELECT rank, gid, p2p, CASE WHEN p2p THEN p2p_seq_id ELSE seq END AS batch,
           bool_or(done) AS finished
    FROM e
    WHERE op = 'coalesced'
    GROUP BY ALL
) fb
WHERE fb.rank = e.rank AND fb.gid = e.gid AND fb.p2p = e.p2p
  AND fb.batch = CASE WHEN e.p2p THEN e.p2p_seq_id ELSE e.seq END;
