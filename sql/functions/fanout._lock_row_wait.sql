-- fanout._lock_row_wait(p_name): takes the lock row p_name of
-- fanout.lock_row FOR UPDATE, waiting for the transaction that holds it
-- (to the end of the caller's transaction). For serialisation that must
-- wait rather than pass (subscribe of a new group: 'subscribe:<topic_id>',
-- created with the topic). No tenant can hold such a row (it needs UPDATE
-- on fanout.lock_row), unlike an advisory key. A row missing (a topic
-- created before the upgrade made it) is created here.
-- Tables: fanout.lock_row.
CREATE OR REPLACE FUNCTION fanout._lock_row_wait(p_name text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    PERFORM 1 FROM fanout.lock_row l WHERE l.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO fanout.lock_row (name) VALUES (p_name) ON CONFLICT DO NOTHING;
        PERFORM 1 FROM fanout.lock_row l WHERE l.name = p_name FOR UPDATE;
    END IF;
END
$fn$;
