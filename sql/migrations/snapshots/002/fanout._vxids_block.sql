-- fanout._vxids_block(p_vxids, p_since, p_now, p_wait, p_rel): whether any of
-- the transactions p_vxids (recorded at p_since by fanout._running_vxids) is
-- still running and still holds a rotation step back: any of them, until
-- p_wait has passed since p_since (on the p_now clock); after that only one
-- that holds a lock on p_rel (the topic's table), so a session idle in a
-- transaction elsewhere cannot stop rotation for good. Reads pg_locks.
CREATE OR REPLACE FUNCTION fanout._vxids_block(
    p_vxids text[], p_since timestamptz, p_now timestamptz, p_wait interval, p_rel regclass)
RETURNS boolean
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT EXISTS (SELECT 1 FROM pg_locks l
                   WHERE l.locktype = 'virtualxid' AND l.virtualtransaction = ANY (p_vxids)
                     AND l.pid IS NOT NULL
                     AND (p_since > p_now - p_wait
                          OR EXISTS (SELECT 1 FROM pg_locks h
                                     WHERE h.locktype = 'relation' AND h.relation = p_rel
                                       AND h.virtualtransaction = l.virtualtransaction)))
$fn$;
