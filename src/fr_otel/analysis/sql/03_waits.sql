-- What each rank is blocked on: its oldest unfinished op (its stream runs in order, so
-- nothing after it can finish first). The head's fields are waits.Head's.
CREATE OR REPLACE TEMP TABLE heads AS
SELECT
    rank,
    arg_min(
        struct_pack(gid, seq, p2p, op, peer, started := coalesce(started, false), record_id,
                    created_ns := time_created_ns, site, timeout_ms, dump_time_ns,
                    retired := coalesce(retired_only, false)),
        record_id
    ) AS head
FROM e
WHERE NOT done AND op <> 'coalesced'
GROUP BY rank;
