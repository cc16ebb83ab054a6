-- fanout._window_page(p_group_id, p_topic_id, p_table, p_limit, p_max_bytes):
-- the next page of at most p_limit messages (and p_max_bytes bytes, the
-- first message always) of an unpartitioned group's stream, from the
-- group's position (snapshot window and cursor in fanout.consumer_group):
-- fanout._window_scan, which has the algorithm. The caller holds the group
-- row FOR NO KEY UPDATE and writes the returned state back (o_changed).
-- Reads fanout.consumer_group; the rest as fanout._window_scan.
CREATE OR REPLACE FUNCTION fanout._window_page(
    p_group_id bigint, p_topic_id bigint, p_table text, p_limit int, p_max_bytes bigint,
    OUT o_ids bigint[], OUT o_txids xid8[],
    OUT o_payloads jsonb[], OUT o_headers jsonb[], OUT o_groups text[], OUT o_published timestamptz[],
    OUT o_lo pg_snapshot, OUT o_hi pg_snapshot, OUT o_cur_txid xid8, OUT o_cur_id bigint,
    OUT o_changed boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    SELECT w.* INTO o_ids, o_txids, o_payloads, o_headers, o_groups, o_published, o_lo, o_hi, o_cur_txid,
                    o_cur_id, o_changed
    FROM fanout.consumer_group g
    CROSS JOIN LATERAL fanout._window_scan(g.group_id, p_topic_id, p_table, NULL, false, p_limit, p_max_bytes,
                                           g.win_lo, g.win_hi, g.cur_txid, g.cur_id, g.effective_start_id,
                                           g.bit_no) w
    WHERE g.group_id = p_group_id;
END
$fn$;
