-- fanout._lock_row_wait(p_name): takes the lock row p_name of
-- fanout.lock_row, waiting for the transaction that holds it (to the end
-- of the caller's transaction). For serialisation that must wait rather
-- than pass (subscribe of a new group: 'subscribe:<topic_id>', created with
-- the topic). No tenant can hold such a row (it needs UPDATE on
-- fanout.lock_row), unlike an advisory key. A row missing (a topic created
-- before the upgrade made it) is created here.
-- Takes it by updating it (a new version of the row, no value changed),
-- not only locking it: what the caller does next counts rows on its
-- snapshot (subscribe's max_groups), and a REPEATABLE READ (or
-- SERIALIZABLE) snapshot taken before the previous holder committed would
-- not see that holder's rows. Such a caller gets a serialization failure
-- (40001: retry the transaction) instead of counting without them; a row
-- only locked by the previous holder would let it through.
-- Raises: 40001 (a REPEATABLE READ or SERIALIZABLE caller whose snapshot
-- predates the last holder's commit).
-- Tables: fanout.lock_row.
CREATE OR REPLACE FUNCTION fanout._lock_row_wait(p_name text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    UPDATE fanout.lock_row l SET resume_after = l.resume_after WHERE l.name = p_name;
    IF NOT FOUND THEN
        INSERT INTO fanout.lock_row (name) VALUES (p_name) ON CONFLICT DO NOTHING;
        UPDATE fanout.lock_row l SET resume_after = l.resume_after WHERE l.name = p_name;
    END IF;
END
$fn$;
