-- fanout._refresh_topic_state(p_now): the "cache refresh": recomputes every
-- reference-mode topic's required_mask from its groups and repairs it if it
-- drifted (it never should: triggers keep it exact), logging each repair to
-- fanout.event_log. It also brings a topic's stored epoch up to its epoch
-- sequence when a membership change bumped the sequence and then rolled back
-- (until then every insert lists itself in fanout.stamp_pending: correct,
-- but extra work); a change in flight holds the row and is skipped (in
-- both: a drop_topic left open in a transaction never makes it wait).
-- Bounded: it works through the topics in slices of 500 (by topic id,
-- resuming after the last one on the next call: fanout.lock_row's
-- resume_after); thousands of topics never make one call long.
-- Returns how many topics were repaired, plus one while the pass over the
-- topics is not finished (a round that began in the middle of a pass ends
-- at the last topic); call again while it returns > 0.
-- Takes its own lock row (fanout._try_lock).
-- Tables: fanout.topic_state, fanout.consumer_group, fanout.event_log,
-- fanout_data.m<topic_id>_epoch.
CREATE OR REPLACE FUNCTION fanout._refresh_topic_state(p_now timestamptz DEFAULT now())
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_n      int;
    v_after  bigint;
    v_end    bigint;
    v_more   boolean;
    c_slice  constant int := 500;
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    IF NOT fanout._try_lock('maint:refresh_topic_state') THEN
        RETURN 0;
    END IF;
    SELECT coalesce(l.resume_after, 0) INTO v_after FROM fanout.lock_row l WHERE l.name = 'maint:refresh_topic_state';
    v_after := coalesce(v_after, 0);
    -- This call's slice: the next 500 topics by id.
    SELECT coalesce(max(x.topic_id), 0), count(*) = c_slice INTO v_end, v_more
    FROM (SELECT s.topic_id FROM fanout.topic_state s WHERE s.topic_id > v_after
          ORDER BY s.topic_id LIMIT c_slice) x;
    WITH fixed AS (
        UPDATE fanout.topic_state s
        SET required_mask = fanout._required_mask(s.topic_id), epoch = nextval(s.epoch_seq),
            refreshed_at = clock_timestamp()
        WHERE s.topic_id IN (SELECT l.topic_id FROM fanout.topic_state l
                             WHERE l.topic_id > v_after AND l.topic_id <= v_end
                               AND l.required_mask <> fanout._required_mask(l.topic_id)
                             FOR UPDATE SKIP LOCKED)  -- never waits for a tenant (a drop left open)
          AND s.required_mask <> fanout._required_mask(s.topic_id)
        RETURNING s.topic_id, s.required_mask)
    INSERT INTO fanout.event_log (topic, kind, detail)
    SELECT t.topic, 'topic_state_repaired', jsonb_build_object('required_mask', fixed.required_mask)
    FROM fixed JOIN fanout.topic t ON t.topic_id = fixed.topic_id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    UPDATE fanout.topic_state s SET epoch = pg_sequence_last_value(s.epoch_seq)
    FROM (SELECT l.topic_id FROM fanout.topic_state l
          WHERE l.topic_id > v_after AND l.topic_id <= v_end
            AND l.epoch < pg_sequence_last_value(l.epoch_seq)
          FOR UPDATE SKIP LOCKED) stale
    WHERE s.topic_id = stale.topic_id;
    UPDATE fanout.lock_row l SET resume_after = CASE WHEN v_more THEN v_end ELSE 0 END
    WHERE l.name = 'maint:refresh_topic_state';
    RETURN v_n + CASE WHEN v_more THEN 1 ELSE 0 END;
END
$fn$;
