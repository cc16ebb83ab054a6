-- fanout.heartbeat(topic, group_name, consumer): tells pgq that a consumer of
-- the group is alive (reads and acks count too). A dead group comes back to
-- life. Writes are throttled (at most one per second per group, one per
-- second per member) so thousands of members do not hammer one row.
-- Returns the group's status, so a consumer learns it was paused or
-- cancelled ('active' on queue topics).
-- Raises: PGQ01, PGQ04 (bad consumer name), PGQ13, PGQ14.
-- Tables: fanout.consumer_group, fanout.member, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout.heartbeat(topic text, group_name text, consumer text DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_t   fanout.topic;
    v_g   fanout.consumer_group;
    v_now timestamptz := clock_timestamp();
BEGIN
    v_t := fanout._enter_topic($1, 'consume');
    IF $3 IS NOT NULL THEN
        $3 := fanout._check_name('consumer', $3);  -- NFC, as read stores it
    END IF;
    IF v_t.semantics = 'queue' THEN
        SELECT * INTO STRICT v_g FROM fanout.consumer_group g
        WHERE g.topic_id = v_t.topic_id AND g.group_name IS NULL;
    ELSE
        IF $2 IS NULL THEN
            RAISE EXCEPTION 'group_name is required on pubsub topic %', quote_literal(v_t.topic)
                USING ERRCODE = 'PGQ13';
        END IF;
        SELECT * INTO v_g FROM fanout.consumer_group g WHERE g.topic_id = v_t.topic_id AND g.group_name = fanout._nfc($2);
        IF NOT FOUND THEN
            RAISE EXCEPTION 'group % is not subscribed to topic %', quote_literal($2), quote_literal(v_t.topic)
                USING ERRCODE = 'PGQ14';
        END IF;
    END IF;
    IF v_g.status = 'cancelled' THEN
        RETURN v_g.status;
    END IF;
    IF v_g.status = 'dead' THEN
        v_g := fanout._lock_group(v_t, $2, true);
    ELSIF v_g.last_heartbeat < v_now - interval '1 second' THEN
        UPDATE fanout.consumer_group g SET last_heartbeat = v_now, missed_heartbeats = 0
        WHERE g.group_id = v_g.group_id AND g.last_heartbeat < v_now - interval '1 second';
    END IF;
    IF $3 IS NOT NULL THEN
        PERFORM fanout._touch_member(v_g.group_id, $3, v_now, true);
    END IF;
    RETURN v_g.status;
END
$fn$;
