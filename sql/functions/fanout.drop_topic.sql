-- fanout.drop_topic(topic, force): drops a topic with its messages, groups,
-- leases, retries and dead letters. Without force it refuses while a group
-- is active (pubsub) or messages are still undelivered.
-- Returns true.
-- Publishers, readers and subscribers of the topic that come in meanwhile
-- wait for the drop and then get PGQ01 (fanout._enter).
-- Raises: PGQ01, PGQ08 (active groups or undelivered messages; pass force),
-- PGQ21 (no admin grant).
-- Tables: every fanout table row of the topic, fanout_data.m<topic_id>,
-- fanout_data.m<topic_id>_dedupe (and fanout_data.m<topic_id>_done in
-- reference mode), fanout.lock_row, fanout.topic_usage, fanout.quota_block.
CREATE OR REPLACE FUNCTION fanout.drop_topic(topic text, force boolean DEFAULT false)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
-- The DROP ... IF EXISTS of objects a topic of this kind never had (a
-- completion table, a key-partition page function) would each say so.
SET client_min_messages = warning
AS $fn$
#variable_conflict use_column
DECLARE
    v_t fanout.topic;
    v_n bigint;
BEGIN
    PERFORM fanout._authorize($1, 'admin');
    v_t := fanout._topic($1);
    -- Wait for the transactions using the topic and keep new ones out until
    -- this one ends: they then find no topic (PGQ01; see fanout._enter,
    -- which takes ACCESS SHARE on this table). First, before any row: a
    -- user holds the table before it takes a row of the topic's. Two drops
    -- of one topic queue here.
    BEGIN
        EXECUTE format('LOCK TABLE ONLY fanout_data.%I IN ACCESS EXCLUSIVE MODE', v_t.data_table);
    EXCEPTION WHEN undefined_table THEN
        RAISE EXCEPTION 'topic % does not exist', quote_literal($1) USING ERRCODE = 'PGQ01';
    END;
    -- Lock the row here (fanout._topic is STABLE and cannot lock); a
    -- concurrent drop that committed meanwhile makes this one PGQ01.
    SELECT * INTO v_t FROM fanout.topic t WHERE t.topic_id = v_t.topic_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'topic % does not exist', quote_literal($1) USING ERRCODE = 'PGQ01';
    END IF;
    IF NOT coalesce($2, false) THEN
        SELECT count(*) INTO v_n FROM fanout.consumer_group g
        WHERE g.topic_id = v_t.topic_id AND g.group_name IS NOT NULL AND g.status = 'active';
        IF v_n > 0 THEN
            RAISE EXCEPTION 'topic % has % active group(s)', quote_literal(v_t.topic), v_n
                USING ERRCODE = 'PGQ08', HINT = 'unsubscribe them, or pass force => true';
        END IF;
        IF EXISTS (SELECT 1 FROM fanout.consumer_group g
                   WHERE g.topic_id = v_t.topic_id AND g.status IN ('active', 'paused')
                     AND fanout._group_has_backlog(g.group_id)) THEN
            RAISE EXCEPTION 'topic % still has undelivered messages', quote_literal(v_t.topic)
                USING ERRCODE = 'PGQ08', HINT = 'drain it, or pass force => true';
        END IF;
    END IF;
    EXECUTE format('DROP TABLE fanout_data.%I', v_t.data_table);
    EXECUTE format('DROP TABLE fanout_data.%I', v_t.data_table || '_dedupe');
    EXECUTE format('DROP TABLE IF EXISTS fanout_data.%I', v_t.data_table || '_done');  -- reference mode
    EXECUTE format('DROP FUNCTION IF EXISTS fanout_data.%I(smallint, bigint[])', v_t.data_table || '_done_add');
    EXECUTE format('DROP FUNCTION IF EXISTS fanout_data.%I(jsonb, jsonb, text)', v_t.data_table || '_insert');
    EXECUTE format('DROP FUNCTION IF EXISTS fanout_data.%I(jsonb[], jsonb[], text[])', v_t.data_table || '_insert_batch');
    EXECUTE format('DROP FUNCTION IF EXISTS fanout_data.%I(bigint, jsonb, jsonb, text, timestamptz, smallint, bigint)',
                   v_t.data_table || '_insert_one');
    EXECUTE format('DROP FUNCTION IF EXISTS fanout_data.%I(jsonb[], jsonb[], text[], text[], timestamptz, smallint, interval)',
                   v_t.data_table || '_insert_keyed');
    EXECUTE format('DROP FUNCTION IF EXISTS fanout_data.%I(int, int, xid8[], xid8, xid8[], xid8, bigint, bigint, int, bigint, jsonb)',
                   v_t.data_table || '_page');
    EXECUTE format('DROP FUNCTION IF EXISTS fanout_data.%I(bigint, bigint[], xid8[], int[])', v_t.data_table || '_rows');
    EXECUTE format('DROP FUNCTION IF EXISTS fanout_data.%I(text, bigint, interval)', v_t.data_table || '_claim');
    EXECUTE format('DROP FUNCTION IF EXISTS fanout_data.%I(text, interval, jsonb, jsonb, text, timestamptz, smallint)',
                   v_t.data_table || '_insert_claimed');
    -- No foreign key on this one (its check cost every publish), nor on
    -- leases (below).
    DELETE FROM fanout.seq_published s WHERE s.topic_id = v_t.topic_id;
    -- Leases have no foreign key to their group (its check locked the group
    -- row on every page): they go here. No reader can add one meanwhile
    -- (they wait for the topic's table).
    DELETE FROM fanout.lease l
    WHERE l.group_id IN (SELECT g.group_id FROM fanout.consumer_group g WHERE g.topic_id = v_t.topic_id);
    -- Its lock row, usage and quota block (no foreign keys).
    DELETE FROM fanout.lock_row r WHERE r.name IN ('reconcile:' || v_t.topic_id, 'subscribe:' || v_t.topic_id);
    DELETE FROM fanout.topic_usage u WHERE u.topic_id = v_t.topic_id;
    DELETE FROM fanout.quota_block q WHERE q.topic_id = v_t.topic_id;
    DELETE FROM fanout.topic t WHERE t.topic_id = v_t.topic_id;
    INSERT INTO fanout.event_log (topic, kind, detail)
    VALUES (v_t.topic, 'topic_dropped', jsonb_build_object('force', coalesce($2, false)));
    RETURN true;
END
$fn$;
