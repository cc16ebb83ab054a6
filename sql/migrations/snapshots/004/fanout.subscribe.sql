-- fanout.subscribe(topic, group_name, start_position, start_at,
-- start_message_id, max_backfill, heartbeat_timeout, dead_after_misses,
-- backfill_batch, backfill_scope, filter):
-- subscribes a consumer group to a pubsub topic. The start position applies
-- only when the group is new (like Kafka's auto.offset.reset): calling
-- subscribe(..., 'earliest') on every restart never rewinds an existing group
-- (use fanout.seek for that) and leaves its settings as they are. A dead group
-- that subscribes again is resurrected. In offset mode no backfill is needed:
-- the group's cursor simply starts earlier. In reference mode the group gets
-- a bit (at most 64 groups) and a late joiner a batched backfill
-- (backfill_batch messages per step, scope pending_only or all_retained, see
-- fanout._bitmap_step); it reads nothing until the backfill completes.
-- filter (a JSON object, fanout._check_filter; NULL: none): the group
-- receives only messages whose headers contain it, the others are passed
-- over as if acked and counted (docs/filters.md). It is set when the group
-- is created; an existing group's subscribe with NULL leaves its filter as
-- it is, with another filter than its own raises PGQ03 (fanout.set_filter
-- changes it).
-- Returns one row: status, effective_start_message_id (first retained message
-- the group gets; NULL for latest), backfill_status (not_needed, or the
-- backfill's status).
-- Raises: PGQ01, PGQ03 (bad option or filter), PGQ04 (bad name), PGQ09 (reference mode
-- outside READ COMMITTED: the join snapshot must be fresh), PGQ16 (the group was
-- cancelled: choose another name), PGQ17 (65th group in reference mode),
-- PGQ19 (not a pubsub topic), PGQ22 (the topic has max_groups groups; a
-- topic's new groups are subscribed one at a time, so concurrent ones count
-- each other), PGQ25 (a groups quota of a grant matching the topic:
-- fanout.set_quota), PGQ28 (a new group while the topic's completion mode
-- switch is in progress: fanout._completion_switch), 40001 (a new group in a REPEATABLE READ or
-- SERIALIZABLE transaction whose snapshot predates another new group's
-- commit: its max_groups count would miss that group; retry).
-- Tables: fanout.topic, fanout.lock_row (the topic's, for a new group), fanout.topic_grant
-- (quota rows locked), fanout.consumer_group, fanout.group_filter, fanout.kpart (partitioned topics:
-- the group's partition cursors), fanout.event_log, fanout_data.*.
CREATE OR REPLACE FUNCTION fanout.subscribe(
    topic             text,
    group_name        text,
    start_position    text DEFAULT 'latest',
    start_at          timestamptz DEFAULT NULL,
    start_message_id  bigint DEFAULT NULL,
    max_backfill      bigint DEFAULT 1000000,
    heartbeat_timeout interval DEFAULT '5 minutes',
    dead_after_misses int DEFAULT 3,
    backfill_batch    int DEFAULT 10000,
    backfill_scope    text DEFAULT 'pending_only',
    filter            jsonb DEFAULT NULL)
RETURNS TABLE(status text, effective_start_message_id bigint, backfill_status text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_t   fanout.topic;
    v_g   fanout.consumer_group;
    v_s   record;
    v_pos text;
    v_bit int;
    v_bf  text := 'not_needed';
    v_filter jsonb;
BEGIN
    v_t := fanout._enter_topic($1, 'consume');
    IF v_t.semantics <> 'pubsub' THEN
        RAISE EXCEPTION 'topic % is a queue topic; only pubsub topics have subscriptions', quote_literal(v_t.topic)
            USING ERRCODE = 'PGQ19', HINT = 'queue readers just call fanout.read()';
    END IF;
    $2 := fanout._check_name('group_name', $2);  -- NFC
    IF NOT EXISTS (SELECT 1 FROM fanout.consumer_group g WHERE g.topic_id = v_t.topic_id AND g.group_name = $2) THEN
        -- A topic's new groups one at a time, on the topic's lock row (a row
        -- of pgq's own, not an advisory lock any role could take), taken
        -- before the limits are counted: the max_groups count below then
        -- sees the groups of subscribes that committed while this one
        -- waited (two at once both passed it). The row is updated, so a
        -- REPEATABLE READ snapshot that cannot see such a group fails
        -- (40001) rather than count without it (fanout._lock_row_wait).
        PERFORM fanout._lock_row_wait('subscribe:' || v_t.topic_id);
    END IF;
    PERFORM fanout._check_subscribe_limits(v_t, $2, $6, $7, $8);
    v_pos := fanout._normalize_option('start_position', $3);
    IF $6 IS NULL OR $6 < 0 THEN
        RAISE EXCEPTION 'max_backfill must be a non-negative number, got %', coalesce($6::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF $7 IS NULL OR $7 < interval '1 second' THEN
        RAISE EXCEPTION 'heartbeat_timeout must be at least 1 second, got %', coalesce($7::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF $8 IS NULL OR $8 < 1 THEN
        RAISE EXCEPTION 'dead_after_misses must be at least 1, got %', coalesce($8::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF $9 IS NULL OR $9 < 1 OR $9 > 1000000 THEN
        RAISE EXCEPTION 'backfill_batch must be between 1 and 1000000, got %', coalesce($9::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF $10 IS NULL OR lower($10) NOT IN ('pending_only', 'all_retained') THEN
        RAISE EXCEPTION 'backfill_scope must be pending_only or all_retained, got %', coalesce(quote_literal($10), 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    v_filter := fanout._check_filter(v_t, $11);
    SELECT * INTO v_g FROM fanout.consumer_group g
    WHERE g.topic_id = v_t.topic_id AND g.group_name = $2 FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        -- A new group: creators of new groups on the topic go one at a time
        -- on the topic's lock row (new groups are rare; an existing group's
        -- subscribe, every member's restart, takes only its own row; the row
        -- is usually held already, from before the count above). Not the
        -- topic's row (regenerate_topics and publish lock it). Then the
        -- group again: a creator that held the row before this one committed
        -- it meanwhile (a fresh snapshot in READ COMMITTED).
        PERFORM fanout._lock_row_wait('subscribe:' || v_t.topic_id);
        SELECT * INTO v_g FROM fanout.consumer_group g
        WHERE g.topic_id = v_t.topic_id AND g.group_name = $2 FOR NO KEY UPDATE;
    END IF;
    IF FOUND THEN
        IF v_g.status = 'cancelled' THEN
            RAISE EXCEPTION 'group % of topic % was cancelled and cannot be subscribed again',
                quote_literal($2), quote_literal(v_t.topic)
                USING ERRCODE = 'PGQ16', HINT = 'subscribe under a new group name';
        END IF;
        IF $11 IS NOT NULL AND v_filter IS DISTINCT FROM
                (SELECT f.filter FROM fanout.group_filter f WHERE f.group_id = v_g.group_id) THEN
            RAISE EXCEPTION 'group % of topic % exists with another filter (%)', quote_literal($2),
                quote_literal(v_t.topic),
                coalesce((SELECT f.filter FROM fanout.group_filter f WHERE f.group_id = v_g.group_id)::text, 'none')
                USING ERRCODE = 'PGQ03', HINT = 'change a group''s filter with fanout.set_filter';
        END IF;
        IF v_g.status = 'dead' THEN
            v_g := fanout._resurrect(v_g);
        END IF;
        SELECT j.status INTO v_bf FROM fanout.bitmap_job j WHERE j.group_id = v_g.group_id AND j.kind = 'backfill';
        RETURN QUERY SELECT v_g.status, fanout._effective_start(v_t, v_g), coalesce(v_bf, 'not_needed');
        RETURN;
    END IF;

    -- The mode again: a switch to reference (fanout._completion_switch_reference)
    -- that committed while this call waited for the topic's table gives the
    -- new group a bit.
    v_t.completion := (SELECT t.completion FROM fanout.topic t WHERE t.topic_id = v_t.topic_id);
    IF EXISTS (SELECT 1 FROM fanout.topic t WHERE t.topic_id = v_t.topic_id
               AND t.completion_switch_id IS NOT NULL AND t.completion_switch_done_at IS NULL) THEN
        -- A new group has no bit; a session still using the page function
        -- from before the switch would filter its reads by it and see nothing.
        RAISE EXCEPTION 'topic % is switching its completion mode; a new group may subscribe once it has finished',
            quote_literal(v_t.topic) USING ERRCODE = 'PGQ28',
            HINT = 'retry after the next maintenance rounds (event_log kind completion_switched)';
    END IF;
    IF v_t.completion = 'reference' THEN
        -- Before the snapshot that defines what the group gets: every
        -- transaction it does not see gets the group's bit (_stamp_fence).
        -- That snapshot must be fresh: not a REPEATABLE READ one.
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION 'subscribing to a reference-mode topic must run in READ COMMITTED, not %',
                upper(current_setting('transaction_isolation')) USING ERRCODE = 'PGQ09';
        END IF;
        PERFORM fanout._stamp_fence(v_t.topic_id);
    END IF;
    -- The quotas of the grants whose patterns match the topic (PGQ25).
    PERFORM fanout._quota_check(v_t.topic, 'groups');
    v_s := fanout._start_state(v_t, v_pos, $4, $5, $6);
    IF v_t.completion = 'reference' THEN
        v_bit := fanout._assign_bit(v_t);
    END IF;
    INSERT INTO fanout.consumer_group AS g (topic_id, group_name, win_lo, win_hi, start_position,
        effective_start_id, max_backfill, heartbeat_timeout, dead_after_misses, bit_no, joined_id, join_snap)
    VALUES (v_t.topic_id, $2, v_s.o_lo, v_s.o_hi, v_pos, v_s.o_start_id, $6, $7, $8, v_bit,
            CASE WHEN v_pos = 'latest' THEN fanout._next_id(v_t) ELSE v_s.o_start_id END, v_s.o_hi)
    RETURNING * INTO v_g;
    IF v_filter IS NOT NULL THEN
        INSERT INTO fanout.group_filter (group_id, filter) VALUES (v_g.group_id, v_filter);
        IF NOT v_t.has_filters THEN
            UPDATE fanout.topic t SET has_filters = true WHERE t.topic_id = v_t.topic_id AND NOT t.has_filters;
        END IF;
    END IF;
    PERFORM fanout._kpart_cursors(v_t.topic_id, v_g.group_id);  -- partitioned: its cursors
    IF v_bit IS NOT NULL AND v_pos <> 'latest' THEN
        -- Reference mode: the group's bit goes onto retained messages in batches.
        PERFORM fanout._start_bitmap_job(v_g.group_id, 'backfill', v_s.o_start_id, $9, lower($10));
        v_bf := 'not_started';
    END IF;
    INSERT INTO fanout.event_log (topic, group_name, kind, detail)
    VALUES (v_t.topic, $2, 'subscribed', jsonb_build_object('start_position', v_pos,
            'effective_start_message_id', v_s.o_effective_start_id)
            || CASE WHEN v_filter IS NOT NULL THEN jsonb_build_object('filter', v_filter) ELSE '{}' END);
    RETURN QUERY SELECT v_g.status, v_s.o_effective_start_id, v_bf;
END
$fn$;
