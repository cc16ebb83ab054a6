-- fanout.alter_topic(topic, ...options): changes a topic's settings; a NULL
-- option is left as it is. semantics is fixed at creation; completion may
-- go from 'reference' to 'offset' (fanout._completion_switch: live, finished
-- by maintenance) and from 'offset' to 'reference' on a pubsub topic
-- (fanout._completion_switch_reference: live, in one short lock of the
-- topic's table); the same mode changes nothing (docs/completion-switch.md).
-- max_groups (1..1000000, default 1000) caps the topic's consumer groups
-- (fanout._check_subscribe_limits, PGQ22); a tenant's admin may set it up to
-- 1000, above that (and above what the topic has) only an operator (admin
-- grant on '%', fanout._authorize_all: PGQ21 otherwise), so a tenant stays
-- bounded. Lowering it below the groups a topic has removes none: only new
-- subscriptions are refused. Reference topics keep their 64 (PGQ17).
-- sequence_ordering => false turns per-aggregate sequence ordering off for
-- good (true on a topic without it: PGQ03): every group's messages parked
-- for their turn (fanout.seq_wait) go to fanout.retry, due at once, with the
-- attempts they had (none), and the groups' sequence bookkeeping goes;
-- messages under a lease stay leased. The groups' rows are locked first, so
-- a read in progress finishes before; a read that looked the topic up
-- before this commits still passes its page through (fanout._sequence_gate
-- reads the flag again under the group's lock). Publishes may still pass a
-- sequence (and a message_group): it deduplicates by (aggregate, sequence)
-- as before, nothing waits for its turn (docs/architecture.md, "Turning
-- ordering off").
-- priorities => false turns priority order off (docs/filters.md): messages
-- already published with a priority, and later ones (publish still takes
-- one), are read in commit order; a group or key partition in the middle of
-- a window it reads by priority finishes that window by priority (its cursor
-- is at the window's start, fanout._window_walk) and reads the next ones in
-- commit order. Leases, retries and parked messages are untouched.
-- priorities => true turns it back on (the next windows by priority);
-- either is a no-op when already so; true on a sequence-ordered topic is
-- PGQ03 (it takes no priorities, PGQ23). An event_log row records a change.
-- partitions may be raised on a partitioned topic, never lowered: keys are
-- then hashed over the new count, so a key may move to another key
-- partition; messages already published stay where they are, so per-key
-- order holds across the change only for keys whose earlier messages were
-- consumed (README, "Ordering"). An event_log row records the change.
-- notify_when: 'always' or 'waiters' (fanout.create_topic; docs/wakeups.md).
-- segment_interval (deprecated alias partition_interval; both with different
-- values: PGQ03, fanout._segment_interval): how long a segment stays open,
-- the open one included (fanout._manage_partitions rotates by it).
-- Returns the topic id.
-- Raises: PGQ01, PGQ03 (a bad value), PGQ21 (max_groups above 1000 without
-- an operator's grant), PGQ17 (to reference with more than 64 groups), PGQ28
-- (completion switch while a backfill or release job has work left, to
-- reference while the table cannot be locked or a switch to offset is
-- unfinished), PGQ09 (to reference outside READ COMMITTED). Tables: fanout.topic, fanout.event_log, fanout.kpart (cursors of
-- new partitions), fanout.consumer_group (locked), fanout.seq_wait,
-- fanout.seq_state, fanout.seq_done, fanout.seq_lost, fanout.retry,
-- fanout_data.* (notify trigger, insert functions, page functions),
-- fanout.bitmap_job (completion switch); priorities only fanout.topic and
-- fanout.event_log.
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
    whole_transactions                  boolean DEFAULT NULL,
    max_groups                          int DEFAULT NULL,
    sequence_ordering                   boolean DEFAULT NULL,
    notify_when                         text DEFAULT NULL,
    priorities                          boolean DEFAULT NULL,
    completion                          text DEFAULT NULL,
    segment_interval                    interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_old fanout.topic;
    v_new fanout.topic;
    v_n   bigint;
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
    v_new.partition_interval := coalesce(fanout._segment_interval($20, $10), v_old.partition_interval);
    v_new.dedupe_window := coalesce($11, v_old.dedupe_window);
    v_new.gap_alert_after := coalesce($12, v_old.gap_alert_after);
    v_new.partitions := coalesce($13, v_old.partitions);
    v_new.whole_transactions := coalesce($14, v_old.whole_transactions);
    v_new.max_groups := coalesce($15, v_old.max_groups);
    v_new.sequence_ordering := coalesce($16, v_old.sequence_ordering);
    v_new.notify_when := coalesce(lower($17), v_old.notify_when);
    IF $16 AND NOT v_old.sequence_ordering THEN
        RAISE EXCEPTION 'sequence_ordering can be turned off, not on: topic % has none', quote_literal($1)
            USING ERRCODE = 'PGQ03', HINT = 'create a new topic with sequence_ordering => true';
    END IF;
    IF v_new.max_groups > greatest(v_old.max_groups, 1000) THEN
        PERFORM fanout._authorize_all();  -- a tenant's admin stays within 1000 groups
    END IF;
    IF $13 IS NOT NULL AND v_old.partitions IS NULL THEN
        RAISE EXCEPTION 'topic % is not partitioned; partitions is fixed at creation for unpartitioned topics',
            quote_literal($1) USING ERRCODE = 'PGQ03', HINT = 'create a new topic with partitions => P';
    END IF;
    IF $13 IS NOT NULL AND $13 < v_old.partitions THEN
        RAISE EXCEPTION 'partitions may be raised, never lowered: % has %, got %',
            quote_literal($1), v_old.partitions, $13 USING ERRCODE = 'PGQ03';
    END IF;
    IF $18 AND v_old.sequence_ordering THEN
        RAISE EXCEPTION 'topic % has sequence_ordering, which takes no priorities', quote_literal($1)
            USING ERRCODE = 'PGQ03', HINT = 'turn sequence ordering off first (sequence_ordering => false)';
    END IF;
    IF $18 IS NOT NULL THEN
        v_new.priorities_dropped_at := CASE WHEN $18 THEN NULL
                                            ELSE coalesce(v_old.priorities_dropped_at, clock_timestamp()) END;
    END IF;
    PERFORM fanout._check_topic_settings(v_new);
    UPDATE fanout.topic t
    SET retention = v_new.retention, zero_subscription_retention = v_new.zero_subscription_retention,
        block_writes_without_subscriptions = v_new.block_writes_without_subscriptions,
        max_retention = v_new.max_retention, max_attempts = v_new.max_attempts,
        max_payload_bytes = v_new.max_payload_bytes, zombie_ttl = v_new.zombie_ttl,
        notify = v_new.notify, partition_interval = v_new.partition_interval,
        dedupe_window = v_new.dedupe_window, gap_alert_after = v_new.gap_alert_after,
        partitions = v_new.partitions, whole_transactions = v_new.whole_transactions,
        max_groups = v_new.max_groups, sequence_ordering = v_new.sequence_ordering,
        notify_when = v_new.notify_when, priorities_dropped_at = v_new.priorities_dropped_at,
        sequence_dropped_at = CASE WHEN v_old.sequence_ordering AND NOT v_new.sequence_ordering
                                   THEN clock_timestamp() ELSE t.sequence_dropped_at END
    WHERE t.topic_id = v_old.topic_id;
    IF $19 IS NOT NULL THEN
        PERFORM fanout._completion_switch(v_old, $19);
    END IF;
    IF v_old.sequence_ordering AND NOT v_new.sequence_ordering THEN
        -- Every group row first, in one order (a read holds its group's row
        -- while it gates and parks), then the parked messages go to retry.
        PERFORM 1 FROM fanout.consumer_group g WHERE g.topic_id = v_old.topic_id
        ORDER BY g.group_id FOR UPDATE;
        WITH released AS (
            DELETE FROM fanout.seq_wait w
            USING fanout.consumer_group g
            WHERE g.topic_id = v_old.topic_id AND w.group_id = g.group_id
            RETURNING w.group_id, w.message_id, w.txid),
        queued AS (
            INSERT INTO fanout.retry (group_id, message_id, txid, attempt, not_before)
            SELECT r.group_id, r.message_id, r.txid, 0, clock_timestamp() FROM released r
            ON CONFLICT DO NOTHING
            RETURNING 1)
        SELECT count(*) INTO v_n FROM queued;
        DELETE FROM fanout.seq_state s USING fanout.consumer_group g
        WHERE g.topic_id = v_old.topic_id AND s.group_id = g.group_id;
        DELETE FROM fanout.seq_done d USING fanout.consumer_group g
        WHERE g.topic_id = v_old.topic_id AND d.group_id = g.group_id;
        DELETE FROM fanout.seq_lost l USING fanout.consumer_group g
        WHERE g.topic_id = v_old.topic_id AND l.group_id = g.group_id;
        INSERT INTO fanout.event_log (topic, kind, count, detail)
        VALUES (v_old.topic, 'sequence_ordering_dropped', v_n, jsonb_build_object('released', v_n));
    END IF;
    IF (v_new.priorities_dropped_at IS NULL) <> (v_old.priorities_dropped_at IS NULL) THEN
        INSERT INTO fanout.event_log (topic, kind, detail)
        VALUES (v_old.topic, CASE WHEN $18 THEN 'priorities_restored' ELSE 'priorities_dropped' END,
                jsonb_build_object('prioritized', v_old.prioritized));
    END IF;
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
