-- fanout._group_view(p_group_id): the figures fanout.groups computes per
-- group: unread messages and the oldest publish time of those and of the
-- messages waiting for their sequence's turn (fanout._group_unread,
-- fanout.seq_wait) and the last sign of life (fanout._liveness).
-- The internal helpers are not granted to any role; this wrapper is, and
-- returns NULLs for a group that does not exist or whose topic the caller
-- may not consume, so calling it directly reveals nothing the view hides.
-- Tables: fanout.consumer_group, fanout.topic, fanout.member, fanout.seq_wait, fanout_data.*.
CREATE OR REPLACE FUNCTION fanout._group_view(
    p_group_id bigint,
    OUT messages bigint, OUT oldest_published_at timestamptz, OUT last_heartbeat timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_g fanout.consumer_group;
    v_topic text;
    v_waiting timestamptz;
BEGIN
    SELECT * INTO v_g FROM fanout.consumer_group g WHERE g.group_id = p_group_id;
    v_topic := (SELECT t.topic FROM fanout.topic t WHERE t.topic_id = v_g.topic_id);
    IF v_topic IS NULL OR NOT fanout._may(v_topic, 'consume') THEN
        RETURN;
    END IF;
    SELECT u.messages, u.oldest_published_at INTO messages, oldest_published_at
    FROM fanout._group_unread(p_group_id) u;
    -- Messages waiting for their sequence's turn are lag too (a stuck
    -- aggregate ages lag_seconds): the oldest one's publish time.
    IF EXISTS (SELECT 1 FROM fanout.seq_wait w WHERE w.group_id = p_group_id) THEN
        EXECUTE format('SELECT min(m.published_at) FROM fanout_data.%I m
                        WHERE m.id IN (SELECT w.message_id FROM fanout.seq_wait w WHERE w.group_id = $1)',
                       (SELECT t.data_table FROM fanout.topic t WHERE t.topic_id = v_g.topic_id))
            INTO v_waiting USING p_group_id;
        oldest_published_at := least(oldest_published_at, v_waiting);
    END IF;
    last_heartbeat := fanout._liveness(v_g);
END
$fn$;
