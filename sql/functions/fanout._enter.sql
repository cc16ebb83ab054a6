-- fanout._enter(p_topic, p_privilege): the first step of every call that
-- uses a topic's messages or groups (publish, publish_batch, read,
-- heartbeat, subscribe): checks the caller's grant (fanout._authorize),
-- for publish the bytes quota (PGQ25 while fanout.quota_block names the
-- topic: fanout._measure_usage), and takes
-- ACCESS SHARE on the topic's message table (ONLY the partitioned parent),
-- which fanout.drop_topic takes in ACCESS EXCLUSIVE mode before it drops
-- anything. A call that comes in while a drop is under way therefore waits
-- for the drop to commit and then finds no topic: PGQ01, instead of an
-- error about a missing internal table (42P01) or a group row that vanished
-- (23503). (Only in READ COMMITTED: a REPEATABLE READ snapshot taken before
-- the drop still sees the topic.) The lock is held to the end of the
-- caller's transaction, like the lock publishing takes on the table anyway.
-- A relation lock, not an advisory one: any role may take any advisory key
-- (and so stall every user of a topic whose key it computes), while locking
-- this table takes privileges on schema fanout_data that no tenant has; a
-- weak relation lock also takes the lock manager's fast path.
-- Raises: PGQ21, PGQ25, PGQ01 (the topic was dropped while the call waited).
-- Tables: as fanout._may; fanout.topic, fanout.quota_block,
-- fanout_data.m<topic_id> (locked).
CREATE OR REPLACE FUNCTION fanout._enter(p_topic text, p_privilege text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_id    bigint;
    v_table text;
    v_qpat  text;
    v_qmax  bigint;
BEGIN
    PERFORM fanout._authorize(p_topic, p_privilege);
    IF p_topic IS NULL THEN
        RETURN;
    END IF;
    SELECT t.topic_id, t.data_table INTO v_id, v_table FROM fanout.topic t WHERE t.topic = fanout._nfc(p_topic);
    IF v_table IS NULL THEN
        RETURN;  -- the caller's look-up raises PGQ01
    END IF;
    BEGIN
        EXECUTE format('LOCK TABLE ONLY fanout_data.%I IN ACCESS SHARE MODE', v_table);
    EXCEPTION WHEN undefined_table THEN
        RAISE EXCEPTION 'topic % does not exist', quote_literal(p_topic)
            USING ERRCODE = 'PGQ01', HINT = 'it was dropped while this call waited';
    END;
    IF p_privilege = 'publish' THEN
        SELECT q.pattern, q.max_bytes INTO v_qpat, v_qmax FROM fanout.quota_block q WHERE q.topic_id = v_id;
        IF FOUND THEN
            RAISE EXCEPTION 'quota reached: the topics matching % may retain at most % bytes together',
                quote_literal(v_qpat), v_qmax
                USING ERRCODE = 'PGQ25',
                      HINT = 'publishing resumes once maintenance measures them under it (consume, or lower retention), or the operator raises it (fanout.set_quota)';
        END IF;
    END IF;
END
$fn$;
