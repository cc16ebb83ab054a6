-- fanout._window_scan(p_group_id, p_topic_id, p_table, p_kpart, p_whole,
-- p_limit, p_max_bytes, p_lo, p_hi, p_cur_txid, p_cur_id, p_start, p_bit):
-- release 0.1.0's window scan in commit order, kept with its signature for a
-- read of 0.1.0 in flight while the upgrade commits (its old page functions
-- are gone then): fanout._window_walk without priorities. Nothing of this
-- release calls it; the next release drops it.
-- Tables: those of fanout._window_walk.
CREATE OR REPLACE FUNCTION fanout._window_scan(
    p_group_id bigint, p_topic_id bigint, p_table text, p_kpart int, p_whole boolean,
    p_limit int, p_max_bytes bigint,
    p_lo pg_snapshot, p_hi pg_snapshot, p_cur_txid xid8, p_cur_id bigint, p_start bigint, p_bit int,
    OUT o_ids bigint[], OUT o_txids xid8[],
    OUT o_lo pg_snapshot, OUT o_hi pg_snapshot, OUT o_cur_txid xid8, OUT o_cur_id bigint,
    OUT o_changed boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    SELECT w.o_ids, w.o_txids, w.o_lo, w.o_hi, w.o_cur_txid, w.o_cur_id, w.o_changed
    INTO o_ids, o_txids, o_lo, o_hi, o_cur_txid, o_cur_id, o_changed
    FROM fanout._window_walk(p_group_id, p_topic_id, p_table, p_kpart, p_whole AND p_kpart IS NOT NULL, false,
                             p_limit, p_max_bytes, p_lo, p_hi, p_cur_txid, p_cur_id, p_start, p_bit,
                             NULL, NULL, NULL) w;
END
$fn$;
