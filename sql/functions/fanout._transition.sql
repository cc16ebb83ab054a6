-- fanout._transition(p_topic, p_group_name, p_from, p_to): moves a pubsub
-- group from one of the statuses p_from to p_to, the only way statuses change
-- on request (pause, resume, unsubscribe). Any other transition raises PGQ15
-- naming the current status. Leaving for cancelled releases the group's
-- leases and retries. Returns the new status.
-- Raises: PGQ01, PGQ13, PGQ14, PGQ15, PGQ19 (queue topic).
-- Tables: fanout.consumer_group, fanout.lease, fanout.retry, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout._transition(p_topic text, p_group_name text, p_from text[], p_to text)
RETURNS text
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_t fanout.topic;
    v_g fanout.consumer_group;
BEGIN
    PERFORM fanout._authorize(p_topic, 'admin');
    v_t := fanout._topic(p_topic);
    IF v_t.semantics <> 'pubsub' THEN
        RAISE EXCEPTION 'topic % is a queue topic; its readers have no group to %', quote_literal(p_topic),
            CASE p_to WHEN 'paused' THEN 'pause' WHEN 'active' THEN 'resume' ELSE 'unsubscribe' END
            USING ERRCODE = 'PGQ19';
    END IF;
    v_g := fanout._group_for_admin(p_topic, p_group_name);
    IF NOT v_g.status = ANY (p_from) THEN
        RAISE EXCEPTION 'group % of topic % is %, cannot become %',
            quote_literal(p_group_name), quote_literal(p_topic), v_g.status, p_to
            USING ERRCODE = 'PGQ15', DETAIL = format('current status: %s', v_g.status);
    END IF;
    IF p_to = 'cancelled' THEN
        PERFORM fanout._release_holds(v_g.group_id);
    END IF;
    UPDATE fanout.consumer_group g
    SET status = p_to, status_changed_at = clock_timestamp(), missed_heartbeats = 0,
        last_heartbeat = CASE WHEN p_to = 'active' THEN clock_timestamp() ELSE g.last_heartbeat END
    WHERE g.group_id = v_g.group_id;
    INSERT INTO fanout.event_log (topic, group_name, kind, detail)
    VALUES (v_t.topic, v_g.group_name, 'group_' || p_to, jsonb_build_object('from', v_g.status));
    RETURN p_to;
END
$fn$;
