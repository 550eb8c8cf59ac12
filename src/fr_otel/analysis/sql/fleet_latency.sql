-- fleet_latency: completed collective work by day, op, group kind and size bucket, over
-- every incident: a network regression shows as a step in mean_ms from one day to the next.
-- Columns: day (UTC, YYYY-MM-DD, of the entry's enqueue), op, group_kind (default_pg, the
-- group's description without trailing digits such as mesh_tp, p2p, undescribed),
-- size_bucket (bytes: the largest power of two not above the input's size; 0 for none),
-- calls, mean_ms, max_ms, incidents (that had such work that day).
-- Written for DuckDB and Spark SQL alike: standard aggregates only.
SELECT
    day,
    op,
    group_kind,
    size_bucket,
    CAST(SUM(calls) AS BIGINT) AS calls,
    SUM(total_ms) / SUM(calls) AS mean_ms,
    MAX(max_ms) AS max_ms,
    COUNT(DISTINCT CONCAT(job, '/', incident)) AS incidents
FROM fleet_latency_rows
GROUP BY day, op, group_kind, size_bucket
