-- fanout._maint_lock_topic(p_func, p_topic_id): the first step of a
-- maintenance function's work on one topic. Locks the topic's row FOR KEY
-- SHARE, never waiting: a row that another transaction holds (an
-- alter_topic or a drop_topic not yet committed, possibly a tenant's left
-- open in a transaction) means the topic's tables are or will be locked by
-- it too, so the topic is passed by, recorded (fanout._maint_skipped) and
-- tried again by a later call instead of stalling every other tenant's
-- maintenance behind it. The row lock, held to the end of the maintenance
-- transaction, also keeps such a transaction from starting on the topic
-- meanwhile (it takes the row before the tables, in the same order).
-- Returns true when the topic is locked (and forgets an earlier skip of it),
-- false when it is passed by (or is gone).
-- Tables: fanout.topic, fanout.maint_skip.
CREATE OR REPLACE FUNCTION fanout._maint_lock_topic(p_func text, p_topic_id bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    PERFORM 1 FROM fanout.topic t WHERE t.topic_id = p_topic_id FOR KEY SHARE SKIP LOCKED;
    IF FOUND THEN
        DELETE FROM fanout.maint_skip s WHERE s.func = p_func AND s.topic_id = p_topic_id;
        RETURN true;
    END IF;
    IF EXISTS (SELECT 1 FROM fanout.topic t WHERE t.topic_id = p_topic_id) THEN
        PERFORM fanout._maint_skipped(p_func, p_topic_id,
            'another transaction holds the topic''s row (an alter_topic or drop_topic not yet committed)');
    END IF;
    RETURN false;
END
$fn$;
