-- What each rank is blocked on: its oldest unfinished op (its stream runs in order, so
-- nothing after it can finish first).
CREATE OR REPLACE TEMP TABLE heads AS
SELECT
    rank,
    arg_min(
        struct_pack(gid, seq, p2p, p2p_seq_id, op, peer, started, record_id,
                    time_created_ns, site, timeout_ms, dump_time_ns, retired_only),
        record_id
    ) AS head
FROM e
WHERE NOT done AND op <> 'coalesced'
GROUP BY rank;
