-- fanout._cleanup_partitions(p_now): reclaims storage by dropping whole closed
-- partitions, oldest first, per topic:
--   * when every group that pins storage (fanout._group_pins) has passed it
--     (fanout._group_passed) and it closed more than retention ago (or
--     zero_subscription_retention ago when no group pins the topic);
--   * unconditionally once it closed more than max_retention ago; then every
--     group that had not consumed all of it gets the unread rows counted in
--     lost_messages, its leases and retries into the partition are dropped,
--     and the loss is written to fanout.event_log.
-- No row is ever updated or deleted in a message table. The DROP waits at
-- most 200 ms for its lock (a long transaction that touched the topic keeps
-- the partition for a later round).
-- Bounded: at most 10 partitions per call. Returns how many were dropped;
-- call again while it returns > 0. Takes its own advisory lock.
-- Tables: fanout.partition, fanout.consumer_group, fanout.lease,
-- fanout.retry, fanout.topic, fanout.event_log, fanout_data.*.
CREATE OR REPLACE FUNCTION fanout._cleanup_partitions(p_now timestamptz DEFAULT now())
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_t        fanout.topic;
    v_p        fanout.partition;
    g          fanout.consumer_group;
    v_done     int := 0;
    v_pinning  int;
    v_blocked  boolean;
    v_forced   boolean;
    v_lost     bigint;
    v_total    bigint;
    v_timeout  text := current_setting('lock_timeout');
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended('fanout.maint:cleanup_partitions', 0)) THEN
        RETURN 0;
    END IF;
    FOR v_t IN SELECT * FROM fanout.topic t ORDER BY t.topic_id LOOP
        FOR v_p IN
            SELECT * FROM fanout.partition p
            WHERE p.topic_id = v_t.topic_id AND p.closed_at IS NOT NULL
            ORDER BY p.part_no
        LOOP
            EXIT WHEN v_done >= 10;
            v_pinning := 0;
            v_blocked := false;
            FOR g IN SELECT * FROM fanout.consumer_group cg WHERE cg.topic_id = v_t.topic_id LOOP
                IF fanout._group_pins(g, v_t, p_now) THEN
                    v_pinning := v_pinning + 1;
                    IF NOT fanout._group_passed(g, v_p) THEN
                        v_blocked := true;
                    END IF;
                END IF;
            END LOOP;
            v_forced := v_p.closed_at <= p_now - v_t.max_retention;
            IF NOT v_forced AND (v_blocked OR v_p.closed_at > p_now -
                   CASE WHEN v_pinning = 0 AND v_t.semantics = 'pubsub'
                        THEN v_t.zero_subscription_retention ELSE v_t.retention END) THEN
                EXIT;  -- later partitions are younger and no further consumed
            END IF;

            -- All of it or none: a busy partition (lock timeout) is left
            -- for a later round with nothing counted.
            BEGIN
                -- Count what non-cancelled groups lose: the unread rows of the
                -- partition plus their leases and retries into it.
                v_total := 0;
                FOR g IN SELECT * FROM fanout.consumer_group cg
                         WHERE cg.topic_id = v_t.topic_id AND cg.status <> 'cancelled' LOOP
                    CONTINUE WHEN fanout._group_passed(g, v_p);
                    EXECUTE format('SELECT count(*) FROM fanout_data.%I m
                                    WHERE NOT pg_visible_in_snapshot(m.txid, $1)
                                      AND ((m.txid, m.id) > ($2, $3) OR NOT pg_visible_in_snapshot(m.txid, $4))
                                      AND m.id >= $5',
                                   v_p.relname)
                        INTO v_lost USING g.win_lo, g.cur_txid, g.cur_id, g.win_hi, coalesce(g.effective_start_id, 0);
                    v_lost := v_lost
                        + (SELECT count(*) FROM fanout.retry r
                           WHERE r.group_id = g.group_id AND r.message_id >= v_p.lo_id AND r.message_id < v_p.hi_id)
                        + (SELECT count(*) FROM fanout.lease l, unnest(l.msg_ids) AS x
                           WHERE l.group_id = g.group_id AND l.open_count > 0
                             AND x >= v_p.lo_id AND x < v_p.hi_id
                             AND x <> ALL (l.settled) AND x <> ALL (l.reclaimed));
                    DELETE FROM fanout.retry r
                    WHERE r.group_id = g.group_id AND r.message_id >= v_p.lo_id AND r.message_id < v_p.hi_id;
                    UPDATE fanout.lease l
                    SET reclaimed = l.reclaimed || lost.ids,
                        open_count = l.open_count - cardinality(lost.ids),
                        closed_at = CASE WHEN l.open_count = cardinality(lost.ids) THEN clock_timestamp() END
                    FROM (SELECT l2.lease_id, array_agg(x) AS ids
                          FROM fanout.lease l2, unnest(l2.msg_ids) AS x
                          WHERE l2.group_id = g.group_id AND l2.open_count > 0
                            AND x >= v_p.lo_id AND x < v_p.hi_id
                            AND x <> ALL (l2.settled) AND x <> ALL (l2.reclaimed)
                          GROUP BY l2.lease_id) lost
                    WHERE l.lease_id = lost.lease_id;
                    IF v_lost > 0 THEN
                        UPDATE fanout.consumer_group cg SET lost_messages = cg.lost_messages + v_lost
                        WHERE cg.group_id = g.group_id;
                        INSERT INTO fanout.event_log (topic, group_name, kind, count, detail)
                        VALUES (v_t.topic, g.group_name, 'unread_dropped', v_lost,
                                jsonb_build_object('partition', v_p.relname, 'group_status', g.status,
                                                   'reason', CASE WHEN v_forced THEN 'max_retention'
                                                                  ELSE 'group not pinning' END));
                        v_total := v_total + v_lost;
                    END IF;
                END LOOP;

                PERFORM set_config('lock_timeout', '200ms', true);
                EXECUTE format('DROP TABLE fanout_data.%I', v_p.relname);
                PERFORM set_config('lock_timeout', v_timeout, true);
                DELETE FROM fanout.partition p WHERE p.topic_id = v_p.topic_id AND p.part_no = v_p.part_no;
                IF v_total > 0 THEN
                    UPDATE fanout.topic t SET dropped_unread = t.dropped_unread + v_total WHERE t.topic_id = v_t.topic_id;
                END IF;
                v_done := v_done + 1;
            EXCEPTION WHEN lock_not_available THEN
                PERFORM set_config('lock_timeout', v_timeout, true);
                RAISE NOTICE 'fanout: partition % is busy; dropping it later', v_p.relname;
                EXIT;
            END;
        END LOOP;
    END LOOP;
    RETURN v_done;
END
$fn$;
