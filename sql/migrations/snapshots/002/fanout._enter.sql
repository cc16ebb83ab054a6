-- fanout._enter(p_topic, p_privilege): the first step of every call that
-- uses a topic's messages or groups (publish, publish_batch, read,
-- heartbeat, subscribe): checks the caller's grant (fanout._authorize) and
-- takes a shared transaction-level advisory lock on the topic's name (one of
-- its 32 keys, by backend pid: fanout._topic_lock_key), which
-- fanout.drop_topic takes exclusively (all 32) before it drops anything. A call that
-- comes in while a drop is under way therefore waits for the drop to commit
-- and then finds no topic: PGQ01, instead of an error about a missing
-- internal table (42P01) or a group row that vanished (23503). (Only in READ
-- COMMITTED: a REPEATABLE READ snapshot taken before the drop still sees the
-- topic.) The lock is held to the end of the caller's transaction, like the
-- lock publishing takes on the topic's table anyway.
-- Raises: PGQ21. Tables: as fanout._may.
CREATE OR REPLACE FUNCTION fanout._enter(p_topic text, p_privilege text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    PERFORM fanout._authorize(p_topic, p_privilege);
    IF p_topic IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock_shared(fanout._topic_lock_key(p_topic) # (pg_backend_pid() % 32));
    END IF;
END
$fn$;
