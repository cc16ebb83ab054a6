-- fanout._try_lock(p_name): takes the lock row p_name of fanout.lock_row
-- (creating it when it is not there yet) FOR UPDATE, never waiting; held to
-- the end of the caller's transaction. pgq's own serialisation (one
-- maintenance function at a time, one reconciliation of a topic at a time)
-- goes through it instead of advisory locks: any role may take any advisory
-- key, but locking a row of fanout.lock_row needs UPDATE on it, which only
-- the owner has, so no tenant can make pgq pass its turn or wait.
-- The rows exist before they are needed (the upgrade creates the
-- maintenance functions' and every topic's, create_topic a new topic's): a
-- row created here, on first use, would make a concurrent caller wait for
-- the creating transaction (the insert's unique check).
-- Returns true when the caller now holds the row, false when another
-- transaction does.
-- Tables: fanout.lock_row.
CREATE OR REPLACE FUNCTION fanout._try_lock(p_name text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    PERFORM 1 FROM fanout.lock_row l WHERE l.name = p_name FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM fanout.lock_row l WHERE l.name = p_name) THEN
        RETURN false;  -- another transaction holds it
    END IF;
    -- First use: create it (a concurrent creator makes this a no-op), then try again.
    INSERT INTO fanout.lock_row (name) VALUES (p_name) ON CONFLICT DO NOTHING;
    PERFORM 1 FROM fanout.lock_row l WHERE l.name = p_name FOR UPDATE SKIP LOCKED;
    RETURN FOUND;
END
$fn$;
