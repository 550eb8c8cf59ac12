-- The entries of failed gloo collectives (02_slots.sql's failed_gloo) are not done. Run
-- by the engine only where there are any: `e` may be a view of kept entries until then
-- (prepared.writable).
UPDATE e SET done = false
WHERE done AND NOT p2p AND op <> 'coalesced'
  AND EXISTS (SELECT 1 FROM failed_gloo f
              WHERE f.gid = e.gid AND f.seq = e.seq AND f.rank = e.rank);
