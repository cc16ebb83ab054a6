-- fanout._kpart_claim(p_t, p_group, p_consumer, p_max, p_lease, p_max_bytes,
-- p_partition, p_now): fanout.read for a partitioned topic (called by it after
-- its argument checks). Never locks the group row (only a throttled
-- heartbeat write every few seconds): members of one group claim on their own
-- key partitions' rows (fanout.kpart), so claims on different partitions
-- never wait for each other.
--   * Mode: p_partition NULL = automatic assignment (p_consumer required),
--     else an explicit read of that partition (fanout._kpart_mode refuses
--     mixing the two in one group, PGQ24).
--   * Assignment (fanout._kpart_assign): the caller gets its share of the
--     partitions over the live members, incrementally.
--   * One page per partition: a partition is served only when its previous
--     page (fanout.kpart.lease_id) is settled, or expired (then that page's
--     unsettled messages are the next page, taken over whole: fencing as
--     for any lease), and no nacked message of it waits for its retry time
--     (head-of-line). Due retries of the partition come before its stream
--     (and an expired page joins them when there are any, so that the page
--     is in commit order; whole_transactions holds for them too);
--     the stream page is fanout._window_walk on the partition's position
--     (fanout._kpart_page). One read returns one page of one partition (the
--     least recently served ready one it owns).
-- Returns the page as fanout._group_read does (fanout.read returns its rows). Raises: PGQ03 (partition out of range,
-- consumer missing in automatic mode), PGQ13, PGQ14, PGQ16, PGQ22, PGQ24.
-- Tables: fanout.consumer_group, fanout.kpart, fanout.member, fanout.lease,
-- fanout.retry, fanout.dead_letter, fanout.event_log, fanout_data.m<topic_id>.
CREATE OR REPLACE FUNCTION fanout._kpart_claim(
    p_t fanout.topic, p_group text, p_consumer text, p_max int, p_lease interval, p_max_bytes bigint,
    p_partition int, p_now timestamptz,
    OUT o_lease_id bigint, OUT o_ids bigint[], OUT o_txids xid8[], OUT o_atts int[])
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
-- One generic plan per statement and session (the page functions do the
-- same): a few statements here (the lease slot's update, the member count
-- of fanout._kpart_assign) were planned anew on every read, and every
-- statement on a backend's first five reads; in a member storm most page
-- reads came early in their backend's life.
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
    v_g        fanout.consumer_group;
    v_k        fanout.kpart;
    v_parts    int[];
BEGIN
    IF p_t.semantics = 'queue' THEN
        SELECT * INTO STRICT v_g FROM fanout.consumer_group g
        WHERE g.topic_id = p_t.topic_id AND g.group_name IS NULL;
    ELSE
        IF p_group IS NULL THEN
            RAISE EXCEPTION 'group_name is required on pubsub topic %', quote_literal(p_t.topic)
                USING ERRCODE = 'PGQ13';
        END IF;
        SELECT * INTO v_g FROM fanout.consumer_group g
        WHERE g.topic_id = p_t.topic_id AND g.group_name = fanout._nfc(p_group);
        IF NOT FOUND OR v_g.status IN ('cancelled', 'dead') THEN
            v_g := fanout._lock_group(p_t, p_group, true);  -- raises, or resurrects a dead group
        END IF;
    END IF;
    IF p_partition IS NOT NULL AND (p_partition < 0 OR p_partition >= p_t.partitions) THEN
        RAISE EXCEPTION 'partition must be between 0 and % (topic % has % partitions), got %',
            p_t.partitions - 1, quote_literal(p_t.topic), p_t.partitions, p_partition USING ERRCODE = 'PGQ03';
    END IF;
    IF p_partition IS NULL AND p_consumer IS NULL THEN
        RAISE EXCEPTION 'consumer is required to read partitioned topic % (partitions are assigned to named members)',
            quote_literal(p_t.topic)
            USING ERRCODE = 'PGQ03', HINT = 'pass consumer => a stable member name, or read(..., partition => k)';
    END IF;
    IF p_consumer IS NOT NULL THEN
        -- A quarter of the liveness window of fanout._kpart_assign: a live
        -- member stays live, and an idle one writes rarely.
        PERFORM fanout._touch_member(v_g.group_id, p_consumer, p_now, true,
                                     greatest(interval '1 second',
                                              least(v_g.heartbeat_timeout, interval '30 seconds') / 4));
    END IF;
    IF v_g.status <> 'active' THEN
        RETURN;  -- paused
    END IF;
    IF v_g.bit_no IS NOT NULL THEN  -- (nested: the statement locks bitmap_job even when it short-cuts)
        IF EXISTS (SELECT 1 FROM fanout.bitmap_job j
                   WHERE j.group_id = v_g.group_id AND j.kind = 'backfill'
                     AND j.status IN ('not_started', 'in_progress')) THEN
            RETURN;
        END IF;
    END IF;
    -- The mode: NULL is automatic (fanout._kpart_mode is only for going
    -- explicit, or an automatic read of an explicit group).
    IF (p_partition IS NULL AND v_g.kpart_mode = 'explicit')
       OR (p_partition IS NOT NULL AND v_g.kpart_mode IS DISTINCT FROM 'explicit') THEN
        PERFORM fanout._kpart_mode(p_t, v_g.group_id, p_partition IS NOT NULL, p_now);
    END IF;
    -- The group's sign of life, throttled like fanout.read's (and its
    -- delivered count, summed over its partitions).
    IF v_g.last_heartbeat < p_now - least(v_g.heartbeat_timeout / 10, interval '5 seconds') THEN
        -- One member writes it; the others skip it rather than queue behind
        -- that member's read transaction.
        UPDATE fanout.consumer_group g
        SET last_heartbeat = p_now, last_read_at = p_now, missed_heartbeats = 0,
            delivered = (SELECT coalesce(sum(k.delivered), 0) FROM fanout.kpart k WHERE k.group_id = g.group_id)
        WHERE g.group_id = (SELECT x.group_id FROM fanout.consumer_group x
                            WHERE x.group_id = v_g.group_id
                              AND x.last_heartbeat < p_now - least(x.heartbeat_timeout / 10, interval '5 seconds')
                            FOR NO KEY UPDATE SKIP LOCKED);
    END IF;
    -- The partition cursors exist from the group's creation (subscribe,
    -- create_topic for a queue, alter_topic raising P): a read never inserts.
    IF p_partition IS NOT NULL THEN
        v_parts := ARRAY[p_partition];
    ELSE
        v_parts := fanout._kpart_assign(p_t, v_g, p_consumer, p_now);
        IF cardinality(v_parts) = 0 THEN
            RETURN;  -- owns nothing (more members than partitions, or waiting for a release)
        END IF;
    END IF;

    FOR v_k IN
        SELECT k.* FROM fanout.kpart k
        WHERE k.group_id = v_g.group_id AND k.kpart = ANY (v_parts)
        ORDER BY k.last_read_at NULLS FIRST, k.kpart
    LOOP
        -- Explicit readers of one partition take turns; automatic ones skip
        -- a partition another session of the same member is serving.
        IF p_partition IS NOT NULL THEN
            SELECT * INTO v_k FROM fanout.kpart k
            WHERE k.group_id = v_k.group_id AND k.kpart = v_k.kpart FOR UPDATE;
            -- The attempt counts as use of explicit mode, also when it hands
            -- nothing out (fanout._kpart_mode refuses automatic reads
            -- meanwhile); written at most once a second per partition.
            IF v_k.last_read_at IS NULL OR v_k.last_read_at < p_now - interval '1 second' THEN
                UPDATE fanout.kpart k SET last_read_at = p_now
                WHERE k.group_id = v_k.group_id AND k.kpart = v_k.kpart;
            END IF;
        ELSE
            SELECT * INTO v_k FROM fanout.kpart k
            WHERE k.group_id = v_k.group_id AND k.kpart = v_k.kpart AND k.owner = p_consumer
            FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
        END IF;
        -- The group again, now that the partition is held: a seek or an
        -- unsubscribe that held it (fanout._release_holds) may have committed
        -- while this read waited, after the look above (a new status, a new
        -- start for the partition's new cursor).
        SELECT * INTO v_g FROM fanout.consumer_group g WHERE g.group_id = v_g.group_id;
        IF v_g.status <> 'active' THEN
            RETURN;
        END IF;
        SELECT * INTO o_lease_id, o_ids, o_txids, o_atts
        FROM fanout._kpart_page(p_t, v_g, v_k, p_consumer, p_max, p_lease, p_max_bytes, p_now);
        EXIT WHEN o_lease_id IS NOT NULL;  -- one page of one partition per read
    END LOOP;
END
$fn$;
