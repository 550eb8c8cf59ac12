-- One row per collective instance (group, sequence number) of src: the ranks that joined
-- it, the members that did not, whether every rank finished it. Read by fr-otel sql (the
-- `collectives` view) and by an analysis session (its `collectives` relation).
CREATE OR REPLACE VIEW collectives AS
WITH per_instance AS (
    SELECT
        job, incident, pg_name, any_value(pg_desc) AS pg_desc,
        list_sort(any_value(pg_ranks)) AS pg_ranks, collective_seq_id,
        mode(op) AS op,
        list(DISTINCT rank ORDER BY rank) AS joined,
        count(DISTINCT op) > 1 AS ops_differ,
        bool_and(entry_done(state, backend, retired)) AS completed,
        min(time_created_ns) AS first_created_ns
    FROM src
    WHERE NOT entry_p2p(is_p2p, op) AND op <> 'coalesced'
    GROUP BY job, incident, pg_name, list_sort(pg_ranks), collective_seq_id
)
SELECT *, list_filter(pg_ranks, lambda r: NOT list_contains(joined, r)) AS not_joined
FROM per_instance;
