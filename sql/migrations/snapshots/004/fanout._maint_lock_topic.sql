-- fanout._maint_lock_topic(p_func, p_topic_id): the first step of a
-- maintenance function's work on one topic. Takes ACCESS SHARE on the
-- topic's message table (ONLY the parent: the lock fanout._enter takes and
-- fanout.drop_topic takes exclusively before anything else) and then locks
-- the topic's row FOR KEY SHARE, both never waiting: a table or row that
-- another transaction holds (an alter_topic or a drop_topic not yet
-- committed, possibly a tenant's left open in a transaction) means the
-- topic's tables are or will be locked by it too, so the topic is passed
-- by, recorded (fanout._maint_skipped) and tried again by a later call
-- instead of stalling every other tenant's maintenance behind it. The
-- locks, held to the end of the maintenance transaction, also keep such a
-- transaction from starting on the topic meanwhile (a drop takes the table
-- first, an alter the row first: maintenance never waits for either, so
-- neither order can deadlock with it).
-- Returns true when the topic is locked (and forgets an earlier skip of it),
-- false when it is passed by (or is gone).
-- Tables: fanout.topic, fanout.maint_skip, fanout_data.m<topic_id> (locked).
CREATE OR REPLACE FUNCTION fanout._maint_lock_topic(p_func text, p_topic_id bigint)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_table text;
BEGIN
    SELECT t.data_table INTO v_table FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    IF v_table IS NULL THEN
        RETURN false;
    END IF;
    BEGIN
        EXECUTE format('LOCK TABLE ONLY fanout_data.%I IN ACCESS SHARE MODE NOWAIT', v_table);
    EXCEPTION
        WHEN undefined_table THEN
            RETURN false;  -- dropped meanwhile
        WHEN lock_not_available THEN
            PERFORM fanout._maint_skipped(p_func, p_topic_id,
                'another transaction holds the topic''s table (a drop_topic not yet committed)');
            RETURN false;
    END;
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
