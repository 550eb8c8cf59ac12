-- The clock offsets (clocks.py): the CTEs of arrival.sql that read its CTE `joined` and
-- define `clock`. Filled in by clocks.py: `median_se`, `min_samples` and `significant`
-- (MEDIAN_SE, MIN_SAMPLES, SIGNIFICANT).
clock_dev AS (
    SELECT gid, rank, time_completed_ns - completed_center AS d
    FROM joined
    WHERE time_completed_ns IS NOT NULL AND completed_center IS NOT NULL
),
clock_raw AS (
    -- the spread from the standard deviation: no second pass over the differences, and an
    -- outlier (a completion noticed late) only widens the uncertainty, which errs on the
    -- side of naming no one
    SELECT gid, rank, count(*) AS clock_samples, median(d)::BIGINT AS offset_ns,
           round({median_se} * coalesce(stddev_samp(d), 0) / sqrt(count(*)))::BIGINT
               AS uncertainty_ns
    FROM clock_dev
    GROUP BY gid, rank
    HAVING count(*) >= {min_samples}
),
clock AS (
    -- an offset within its noise is no evidence of one (ranks of one host share a clock):
    -- applying it would only add that noise to every comparison
    SELECT gid, rank, clock_samples, uncertainty_ns,
           CASE WHEN abs(offset_ns) > {significant} * uncertainty_ns THEN offset_ns ELSE 0 END
               AS offset_ns
    FROM clock_raw
)
