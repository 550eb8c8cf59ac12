-- The sites (group, call site) of the ranks named stragglers, which stragglers._detail
-- fills in and straggler_detail.sql reads.
CREATE OR REPLACE TEMP TABLE wanted (gid UBIGINT, unit UBIGINT)
