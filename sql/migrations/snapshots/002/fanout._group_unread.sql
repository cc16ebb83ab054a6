-- fanout._group_unread(p_group_id, p_limit): what the group's stream has not
-- handed out yet: how many committed messages (counting stops at p_limit;
-- NULL = count all) and when the oldest of them was published. A message is
-- unread when its txid is not visible in the window's lower snapshot and it
-- lies after the cursor or its transaction was still running at the upper
-- snapshot; messages before the group's start do not count. Index scans on
-- (txid, id) only. Reads fanout.consumer_group and the topic's message table.
CREATE OR REPLACE FUNCTION fanout._group_unread(
    p_group_id bigint, p_limit bigint DEFAULT NULL,
    OUT messages bigint, OUT oldest_published_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_g     fanout.consumer_group;
    v_table text;
BEGIN
    SELECT * INTO STRICT v_g FROM fanout.consumer_group g WHERE g.group_id = p_group_id;
    SELECT t.data_table INTO STRICT v_table FROM fanout.topic t WHERE t.topic_id = v_g.topic_id;
    EXECUTE format(
        'SELECT count(*), min(s.published_at) FROM (
             SELECT m.published_at FROM fanout_data.%1$I m
             WHERE (m.txid = ANY ($1) OR m.txid >= $4)
               AND NOT pg_visible_in_snapshot(m.txid, $5)
               AND ((m.txid, m.id) > ($2, $3) OR NOT pg_visible_in_snapshot(m.txid, $6))
               AND m.id >= $7
             LIMIT $8) s', v_table)
        INTO messages, oldest_published_at
        USING ARRAY(SELECT pg_snapshot_xip(v_g.win_lo)), v_g.cur_txid, v_g.cur_id,
              pg_snapshot_xmax(v_g.win_lo), v_g.win_lo, v_g.win_hi,
              coalesce(v_g.effective_start_id, 0), p_limit;
END
$fn$;
