-- The entries of gloo collectives completed though not yet retired (02_slots.sql's
-- unretired_gloo) are done. Run by the engine only where there are any: `e` may be a view
-- of kept entries until then (prepared.writable).
UPDATE e SET done = true
WHERE NOT done AND NOT p2p AND op <> 'coalesced'
  AND EXISTS (SELECT 1 FROM unretired_gloo u
              WHERE u.gid = e.gid AND u.seq = e.seq AND u.rank = e.rank);
