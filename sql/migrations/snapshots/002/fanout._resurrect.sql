-- fanout._resurrect(p_g): a dead group comes back to life (a heartbeat, a read
-- or fanout.resurrect_group). In offset mode its position was kept, so it
-- continues from there; messages dropped meanwhile were counted in
-- lost_messages when their partitions went. In reference mode its join
-- snapshot moves to now: what commits from here on requires it again, and a
-- backfill covers what it missed (fanout._group_mask_trigger). Returns the
-- updated row.
-- Tables: fanout.consumer_group, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout._resurrect(p_g fanout.consumer_group)
RETURNS fanout.consumer_group
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_g fanout.consumer_group;
BEGIN
    IF p_g.bit_no IS NOT NULL AND p_g.status = 'dead' THEN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION 'a reference-mode group comes back only in READ COMMITTED, not %',
                upper(current_setting('transaction_isolation')) USING ERRCODE = 'PGQ09';
        END IF;
        PERFORM fanout._stamp_fence(p_g.topic_id);  -- before join_snap is taken
    END IF;
    UPDATE fanout.consumer_group g
    SET status = 'active', missed_heartbeats = 0, last_heartbeat = clock_timestamp(),
        status_changed_at = clock_timestamp(), join_snap = fanout._snapshot()
    WHERE g.group_id = p_g.group_id AND g.status = 'dead'
    RETURNING * INTO v_g;
    IF NOT FOUND THEN
        RETURN p_g;
    END IF;
    INSERT INTO fanout.event_log (topic, group_name, kind)
    SELECT t.topic, v_g.group_name, 'group_resurrected' FROM fanout.topic t WHERE t.topic_id = v_g.topic_id;
    RETURN v_g;
END
$fn$;
