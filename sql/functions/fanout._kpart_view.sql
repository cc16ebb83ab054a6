-- fanout._kpart_view(p_group_id, p_kpart): lag of one key partition of a
-- group for view fanout.partitions: messages not handed out yet and when the
-- oldest of them was published (fanout._group_unread at the partition's
-- cursor; a partition without a cursor yet is at the group's position).
-- Returns nothing unless the caller may consume the group's topic.
-- Reads fanout.consumer_group, fanout.topic, fanout.kpart, fanout_data.*.
CREATE OR REPLACE FUNCTION fanout._kpart_view(
    p_group_id bigint, p_kpart int, OUT messages bigint, OUT oldest_published_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_g     fanout.consumer_group;
    v_t     fanout.topic;
BEGIN
    SELECT * INTO v_g FROM fanout.consumer_group g WHERE g.group_id = p_group_id;
    SELECT * INTO v_t FROM fanout.topic t WHERE t.topic_id = v_g.topic_id;
    IF v_t.topic IS NULL OR v_t.partitions IS NULL OR NOT fanout._may(v_t.topic, 'consume') THEN
        RETURN;
    END IF;
    SELECT u.messages, u.oldest_published_at INTO messages, oldest_published_at
    FROM fanout._group_unread(p_group_id, NULL, NULL, p_kpart) u;
END
$fn$;
