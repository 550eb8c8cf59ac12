-- One row per (group, collective sequence number, rank): what that rank issued there.
-- A coalesced group is one slot holding several ops; its trailer is left out of the
-- signature. Ops whose sizes legitimately differ across ranks (all_to_all, gather,
-- scatter) are compared without sizes; their sizes are checked by rules instead.
CREATE OR REPLACE TEMP TABLE slots AS
WITH ops AS (
    SELECT
        *,
        struct_pack(
            op := op,
            i := CASE WHEN list_contains($variable_size_ops, op) THEN NULL ELSE input_sizes END,
            o := CASE WHEN list_contains($variable_size_ops, op) THEN NULL ELSE output_sizes END,
            di := input_dtypes,
            dout := output_dtypes
        ) AS sig_part
    FROM e
    WHERE NOT p2p
)
SELECT
    gkey, seq, rank,
    hash(list(sig_part ORDER BY record_id) FILTER (op <> 'coalesced')) AS sig,
    list(op ORDER BY record_id) FILTER (op <> 'coalesced') AS ops,
    min(record_id) AS first_record,
    min(time_created_ns) AS created_ns,
    bool_and(done) AS done,
    bool_or(started) AS started,
    arg_min(frames, record_id) FILTER (op <> 'coalesced') AS frames,
    -- the call site (innermost frame of the user's code), so that a shifted rank is
    -- matched by op, sizes and where it was called from
    hash(list_filter(
        arg_min(frames, record_id) FILTER (op <> 'coalesced'),
        lambda f: NOT regexp_matches(coalesce(f.filename, ''), $library_frame_pattern)
    )[1]) AS site,
    arg_min(input_sizes, record_id) FILTER (op <> 'coalesced') AS input_sizes,
    arg_min(output_sizes, record_id) FILTER (op <> 'coalesced') AS output_sizes,
    arg_min(input_dtypes, record_id) FILTER (op <> 'coalesced') AS input_dtypes
FROM ops
GROUP BY gkey, seq, rank;

-- The span of sequence numbers each rank's buffer holds for each of its groups.
CREATE OR REPLACE TEMP TABLE windows AS
SELECT gkey, rank, min(seq) AS min_seq, max(seq) AS max_seq
FROM slots
GROUP BY gkey, rank;

-- Per slot of a group, who is present, who is absent although their buffer covers that
-- sequence number, and what the majority issued.
CREATE OR REPLACE TEMP TABLE slot_summary AS
WITH seqs AS (SELECT DISTINCT gkey, seq FROM slots),
expected AS (
    SELECT s.gkey, s.seq, m.rank
    FROM seqs s JOIN (SELECT gkey, unnest(members) AS rank FROM groups) m USING (gkey)
),
status AS (
    SELECT
        x.gkey, x.seq, x.rank, sl.sig,
        CASE
            WHEN sl.rank IS NOT NULL THEN 'present'
            WHEN d.rank IS NULL THEN 'no_dump'
            -- a buffer that holds this group from before `seq`, or the whole history
            WHEN w.min_seq <= x.seq OR (w.rank IS NULL AND d.first_record = 0) THEN 'absent'
            WHEN w.rank IS NULL THEN 'absent_or_evicted'
            ELSE 'evicted'
        END AS status
    FROM expected x
    LEFT JOIN slots sl ON sl.gkey = x.gkey AND sl.seq = x.seq AND sl.rank = x.rank
    LEFT JOIN windows w ON w.gkey = x.gkey AND w.rank = x.rank
    LEFT JOIN dumped d ON d.rank = x.rank
),
sig_counts AS (
    SELECT gkey, seq, sig, count(*) AS n,
           row_number() OVER (PARTITION BY gkey, seq ORDER BY count(*) DESC, sig) AS place
    FROM status WHERE status = 'present'
    GROUP BY gkey, seq, sig
)
SELECT
    s.gkey, s.seq,
    count(*) FILTER (s.status = 'present') AS present,
    count(*) FILTER (s.status = 'absent') AS absent,
    count(DISTINCT s.sig) FILTER (s.status = 'present') AS signatures,
    any_value(c1.sig) AS majority_sig,
    any_value(c1.n) AS majority_n,
    coalesce(any_value(c2.n), 0) AS runner_up_n
FROM status s
LEFT JOIN sig_counts c1 ON c1.gkey = s.gkey AND c1.seq = s.seq AND c1.place = 1
LEFT JOIN sig_counts c2 ON c2.gkey = s.gkey AND c2.seq = s.seq AND c2.place = 2
GROUP BY s.gkey, s.seq;
