-- fanout.alter_topic(topic, ...options): changes a topic's settings; a NULL
-- option is left as it is. semantics, completion and sequence_ordering are
-- fixed at creation.
-- partitions may be raised on a partitioned topic, never lowered: keys are
-- then hashed over the new count, so a key may move to another key
-- partition; messages already published stay where they are, so per-key
-- order holds across the change only for keys whose earlier messages were
-- consumed (README, "Ordering"). An event_log row records the change.
-- Returns the topic id.
-- Raises: PGQ01, PGQ03 (a bad value). Tables: fanout.topic, fanout.event_log, fanout.kpart (cursors of
-- new partitions), fanout_data.* (notify trigger,
-- insert functions).
CREATE OR REPLACE FUNCTION fanout.alter_topic(
    topic                               text,
    retention                           interval DEFAULT NULL,
    zero_subscription_retention         interval DEFAULT NULL,
    block_writes_without_subscriptions  boolean DEFAULT NULL,
    max_retention                       interval DEFAULT NULL,
    max_attempts                        int DEFAULT NULL,
    max_payload_bytes                   int DEFAULT NULL,
    zombie_ttl                          interval DEFAULT NULL,
    notify                              boolean DEFAULT NULL,
    partition_interval                  interval DEFAULT NULL,
    dedupe_window                       interval DEFAULT NULL,
    gap_alert_after                     interval DEFAULT NULL,
    partitions                          int DEFAULT NULL,
    whole_transactions                  boolean DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_old fanout.topic;
    v_new fanout.topic;
BEGIN
    PERFORM fanout._authorize($1, 'admin');
    v_old := fanout._topic($1);
    -- The topic's table before its row, in the order of fanout.drop_topic
    -- (and of every user, fanout._enter): a drop under way is waited for
    -- (PGQ01 after it), and one that comes later waits for this alter.
    BEGIN
        EXECUTE format('LOCK TABLE ONLY fanout_data.%I IN ACCESS SHARE MODE', v_old.data_table);
    EXCEPTION WHEN undefined_table THEN
        RAISE EXCEPTION 'topic % does not exist', quote_literal($1) USING ERRCODE = 'PGQ01';
    END;
    -- Lock the row here (fanout._topic is STABLE and cannot lock) and re-read
    -- it: a concurrent alter may have committed meanwhile, or a drop. FOR
    -- UPDATE, though no key changes: the foreign key check of a group's insert
    -- (subscribe) must wait for a raise of the partition count
    -- (fanout._kpart_cursors).
    SELECT * INTO v_old FROM fanout.topic t WHERE t.topic_id = v_old.topic_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'topic % does not exist', quote_literal($1) USING ERRCODE = 'PGQ01';
    END IF;
    v_new := v_old;
    v_new.retention := coalesce($2, v_old.retention);
    v_new.zero_subscription_retention := coalesce($3, v_old.zero_subscription_retention);
    v_new.block_writes_without_subscriptions := coalesce($4, v_old.block_writes_without_subscriptions);
    v_new.max_retention := coalesce($5, v_old.max_retention);
    v_new.max_attempts := coalesce($6, v_old.max_attempts);
    v_new.max_payload_bytes := coalesce($7, v_old.max_payload_bytes);
    v_new.zombie_ttl := coalesce($8, v_old.zombie_ttl);
    v_new.notify := coalesce($9, v_old.notify);
    v_new.partition_interval := coalesce($10, v_old.partition_interval);
    v_new.dedupe_window := coalesce($11, v_old.dedupe_window);
    v_new.gap_alert_after := coalesce($12, v_old.gap_alert_after);
    v_new.partitions := coalesce($13, v_old.partitions);
    v_new.whole_transactions := coalesce($14, v_old.whole_transactions);
    IF $13 IS NOT NULL AND v_old.partitions IS NULL THEN
        RAISE EXCEPTION 'topic % is not partitioned; partitions is fixed at creation for unpartitioned topics',
            quote_literal($1) USING ERRCODE = 'PGQ03', HINT = 'create a new topic with partitions => P';
    END IF;
    IF $13 IS NOT NULL AND $13 < v_old.partitions THEN
        RAISE EXCEPTION 'partitions may be raised, never lowered: % has %, got %',
            quote_literal($1), v_old.partitions, $13 USING ERRCODE = 'PGQ03';
    END IF;
    PERFORM fanout._check_topic_settings(v_new);
    UPDATE fanout.topic t
    SET retention = v_new.retention, zero_subscription_retention = v_new.zero_subscription_retention,
        block_writes_without_subscriptions = v_new.block_writes_without_subscriptions,
        max_retention = v_new.max_retention, max_attempts = v_new.max_attempts,
        max_payload_bytes = v_new.max_payload_bytes, zombie_ttl = v_new.zombie_ttl,
        notify = v_new.notify, partition_interval = v_new.partition_interval,
        dedupe_window = v_new.dedupe_window, gap_alert_after = v_new.gap_alert_after,
        partitions = v_new.partitions, whole_transactions = v_new.whole_transactions
    WHERE t.topic_id = v_old.topic_id;
    IF v_new.partitions IS DISTINCT FROM v_old.partitions THEN
        -- New messages hash over the new count (fanout._kpart_of); messages
        -- already published stay in their key partition.
        PERFORM fanout._create_insert_functions(v_old.topic_id);
        PERFORM fanout._kpart_cursors(v_old.topic_id, NULL);  -- every group's cursors of the new partitions
        INSERT INTO fanout.event_log (topic, kind, count, detail)
        VALUES (v_old.topic, 'partitions_raised', v_new.partitions - v_old.partitions,
                jsonb_build_object('from', v_old.partitions, 'to', v_new.partitions));
    END IF;
    IF v_new.notify IS DISTINCT FROM v_old.notify THEN
        PERFORM fanout._set_notify(v_old.topic_id, v_new.notify);
    END IF;
    RETURN v_old.topic_id;
END
$fn$;
