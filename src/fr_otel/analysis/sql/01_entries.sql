-- One incident's entries with what matching needs: the group identity (name and
-- global rank set, never the rank-local pg_id), p2p-ness, and whether the work finished.
CREATE OR REPLACE TEMP TABLE e AS
WITH raw AS (
    SELECT
        rank, record_id, pg_name, pg_desc, pg_ranks, collective_seq_id AS seq, p2p_seq_id, op,
        peer, input_sizes, output_sizes, input_dtypes, output_dtypes, state, retired, backend,
        time_created_ns, frames, timeout_ms, dump_time_ns,
        coalesce(is_p2p, false) OR op IN ('send', 'recv') AS p2p,
        -- gloo never marks entries started/completed: retirement is its only completion signal.
        -- For NCCL a retired entry that did not complete timed out.
        state = 'completed' OR (backend = 'gloo' AND coalesce(retired, false)) AS done_self,
        state IN ('started', 'completed') AS started
    FROM src
    WHERE job = $job AND incident = $incident
)
SELECT
    *,
    pg_name || '|' || CAST(list_sort(coalesce(pg_ranks, [])) AS VARCHAR) AS gkey,
    -- ops inside a coalesced batch never complete themselves (pytorch#137969): the
    -- batch's trailing `coalesced` entry carries the completion for all of them
    done_self OR coalesce(bool_or(op = 'coalesced' AND done_self) OVER (
        PARTITION BY rank, pg_name, p2p, CASE WHEN p2p THEN p2p_seq_id ELSE seq END
    ), false) AS done
FROM raw;

-- Every group once: name, description and members.
CREATE OR REPLACE TEMP TABLE groups AS
SELECT gkey, any_value(pg_name) AS pg_name, any_value(pg_desc) AS pg_desc,
       list_sort(any_value(pg_ranks)) AS members, bool_or(p2p) AS has_p2p
FROM e
GROUP BY gkey;

-- Each rank's dump: what it holds and whether it holds its whole history.
CREATE OR REPLACE TEMP TABLE dumped AS
SELECT rank, count(*) AS entries, min(record_id) AS first_record, max(record_id) AS last_record,
       bool_or(state = 'started') AS any_started
FROM e
GROUP BY rank;
