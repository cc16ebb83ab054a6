-- fanout._refresh_topic_state(p_now): the "cache refresh": recomputes every
-- reference-mode topic's required_mask from its groups and repairs it if it
-- drifted (it never should: triggers keep it exact), logging each repair to
-- fanout.event_log. It also brings a topic's stored epoch up to its epoch
-- sequence when a membership change bumped the sequence and then rolled back
-- (until then every insert lists itself in fanout.stamp_pending: correct,
-- but extra work); a change in flight holds the row and is skipped (in
-- both: a drop_topic left open in a transaction never makes it wait).
-- Returns how many topics were repaired; call again while it returns > 0.
-- Takes its own lock row (fanout._try_lock).
-- Tables: fanout.topic_state, fanout.consumer_group, fanout.event_log,
-- fanout_data.m<topic_id>_epoch.
CREATE OR REPLACE FUNCTION fanout._refresh_topic_state(p_now timestamptz DEFAULT now())
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_n int;
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    IF NOT fanout._try_lock('maint:refresh_topic_state') THEN
        RETURN 0;
    END IF;
    WITH fixed AS (
        UPDATE fanout.topic_state s
        SET required_mask = fanout._required_mask(s.topic_id), epoch = nextval(s.epoch_seq),
            refreshed_at = clock_timestamp()
        WHERE s.topic_id IN (SELECT l.topic_id FROM fanout.topic_state l
                             WHERE l.required_mask <> fanout._required_mask(l.topic_id)
                             FOR UPDATE SKIP LOCKED)  -- never waits for a tenant (a drop left open)
          AND s.required_mask <> fanout._required_mask(s.topic_id)
        RETURNING s.topic_id, s.required_mask)
    INSERT INTO fanout.event_log (topic, kind, detail)
    SELECT t.topic, 'topic_state_repaired', jsonb_build_object('required_mask', fixed.required_mask)
    FROM fixed JOIN fanout.topic t ON t.topic_id = fixed.topic_id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    UPDATE fanout.topic_state s SET epoch = pg_sequence_last_value(s.epoch_seq)
    FROM (SELECT l.topic_id FROM fanout.topic_state l
          WHERE l.epoch < pg_sequence_last_value(l.epoch_seq)
          FOR UPDATE SKIP LOCKED) stale
    WHERE s.topic_id = stale.topic_id;
    RETURN v_n;
END
$fn$;
