-- Each rank's dump: what it holds and whether it holds its whole history, from the first
-- pass's entries (made, or loaded: prepared.py). A rank whose dump held no entry (FR off,
-- or a recorder that never read torch's buffer) is no evidence of anything: like a rank
-- without a dump, it is unknown (silent), never absent.
CREATE OR REPLACE TEMP TABLE dumped AS
SELECT rank, count(*) AS entries, min(record_id) AS first_record, max(record_id) AS last_record,
       bool_or(state_started) AS any_started
FROM e
GROUP BY rank;
