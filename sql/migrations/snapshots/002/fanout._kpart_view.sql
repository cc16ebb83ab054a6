-- fanout._kpart_view(p_group_id, p_kpart): lag of one key partition of a
-- group for view fanout.partitions: messages not handed out yet and when the
-- oldest of them was published (fanout._group_unread_at at the partition's
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
    v_k     fanout.kpart;
    v_filter text;
BEGIN
    SELECT * INTO v_g FROM fanout.consumer_group g WHERE g.group_id = p_group_id;
    SELECT * INTO v_t FROM fanout.topic t WHERE t.topic_id = v_g.topic_id;
    IF v_t.topic IS NULL OR v_t.partitions IS NULL OR NOT fanout._may(v_t.topic, 'consume') THEN
        RETURN;
    END IF;
    SELECT * INTO v_k FROM fanout.kpart k WHERE k.group_id = p_group_id AND k.kpart = p_kpart;
    IF FOUND THEN
        v_g.win_lo := v_k.win_lo;
        v_g.win_hi := v_k.win_hi;
        v_g.cur_txid := v_k.cur_txid;
        v_g.cur_id := v_k.cur_id;
    END IF;
    v_filter := format(' AND m.kpart = %s', p_kpart);
    IF v_g.bit_no IS NOT NULL THEN
        v_filter := v_filter || format(' AND (m.required_groups & %L::bigint) <> 0', 1::bigint << v_g.bit_no);
    END IF;
    SELECT u.messages, u.oldest_published_at INTO messages, oldest_published_at
    FROM fanout._group_unread_at(v_g, v_t.data_table, v_filter, NULL) u;
END
$fn$;
