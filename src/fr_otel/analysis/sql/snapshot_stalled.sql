-- Entries of a snapshot's `e` pending for $stall_ns when it was taken (or half their
-- timeout, when that is shorter): the job was stuck (snapshots.read_snapshot).
SELECT count(*) FROM e
WHERE NOT done AND op <> 'coalesced' AND dump_time_ns IS NOT NULL
  AND time_created_ns IS NOT NULL
  AND dump_time_ns - time_created_ns
      >= least($stall_ns, coalesce(timeout_ms, $stall_ns // 500000) * 500000)
