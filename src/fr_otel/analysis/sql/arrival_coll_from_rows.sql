-- The collectives the arrival rows are made of, straight from canonical rows (fr-otel
-- sql's `arrival` view, any incident): the CTE `coll` of arrival.sql, over the relation
-- `source`, of its rows that the condition `where` selects (both filled in by
-- stragglers.py).
coll AS MATERIALIZED (
    -- completed collectives only: one row per rank and slot (a coalesced batch: its first)
    SELECT job, incident, rank, pg_name, pg_desc, list_sort(pg_ranks) AS pg_ranks,
           hash(job, incident, pg_name, list_sort(pg_ranks)) AS gid, len(pg_ranks) AS members,
           collective_seq_id, op, record_id, call_site, hash(call_site) AS site,
           time_created_ns,
           -- NCCL's completion times are its watchdog noticing (a poll, ms apart across
           -- ranks): no clock evidence (clocks.py)
           CASE WHEN backend = 'gloo' THEN time_completed_ns END AS time_completed_ns,
           duration_ms
    FROM {source}
    WHERE {where} AND collective_seq_id IS NOT NULL AND NOT entry_p2p(is_p2p, op)
      AND op <> 'coalesced' AND entry_done(state, backend, retired)
    QUALIFY row_number() OVER (
        PARTITION BY job, incident, pg_name, pg_ranks, collective_seq_id, rank
        ORDER BY record_id) = 1
)
