-- fanout._window_page_priority(p_group_id, p_topic_id, p_table, p_limit,
-- p_max_bytes): release 0.1.0's window scan by priority, kept with its
-- signature for a read of 0.1.0 in flight while the upgrade commits (its
-- old page functions are gone then): fanout._window_walk by priority on the
-- group's position, whose level cursor (prio_*) it writes itself, as 0.1.0
-- did. Nothing of this release calls it; the next release drops it.
-- Tables: fanout.consumer_group, and those of fanout._window_walk.
CREATE OR REPLACE FUNCTION fanout._window_page_priority(
    p_group_id bigint, p_topic_id bigint, p_table text, p_limit int, p_max_bytes bigint,
    OUT o_ids bigint[], OUT o_txids xid8[],
    OUT o_lo pg_snapshot, OUT o_hi pg_snapshot, OUT o_cur_txid xid8, OUT o_cur_id bigint,
    OUT o_changed boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_w record;
BEGIN
    SELECT w.* INTO v_w
    FROM fanout.consumer_group g,
         fanout._window_walk(g.group_id, p_topic_id, p_table, NULL, false, true, p_limit, p_max_bytes,
                             g.win_lo, g.win_hi, g.cur_txid, g.cur_id, g.effective_start_id, g.bit_no,
                             g.prio_level, g.prio_txid, g.prio_id) w
    WHERE g.group_id = p_group_id;
    UPDATE fanout.consumer_group g SET prio_level = v_w.o_plvl, prio_txid = v_w.o_ptx, prio_id = v_w.o_pid
    WHERE g.group_id = p_group_id AND v_w.o_changed;
    SELECT v_w.o_ids, v_w.o_txids, v_w.o_lo, v_w.o_hi, v_w.o_cur_txid, v_w.o_cur_id, v_w.o_changed
    INTO o_ids, o_txids, o_lo, o_hi, o_cur_txid, o_cur_id, o_changed;
END
$fn$;
