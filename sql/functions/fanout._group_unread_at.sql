-- fanout._group_unread_at(p_g, p_table, p_filter, p_limit): the count of
-- fanout._group_unread for one stream position: p_g's window (win_lo,
-- win_hi), cursor (cur_txid, cur_id) and effective_start_id, over message
-- table p_table (a topic's table or one of its storage partitions), with
-- p_filter ANDed to every scan (reference-mode bit, key partition).
-- Reads p_table only.
CREATE OR REPLACE FUNCTION fanout._group_unread_at(
    p_g fanout.consumer_group, p_table text, p_filter text, p_limit bigint,
    OUT messages bigint, OUT oldest_published_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $fn$
DECLARE
    v_g      fanout.consumer_group := p_g;
    v_table  text := p_table;
    v_filter text := p_filter;
BEGIN
    EXECUTE format(
        'SELECT count(*), min(u.published_at) FROM (
             (SELECT m.published_at FROM fanout_data.%1$I m
              WHERE m.txid >= $1 AND (m.txid, m.id) > ($2, $3) AND (m.id >= $4 OR m.txid >= $9 OR m.txid = ANY ($7)) %2$s LIMIT $5)
             UNION ALL
             (SELECT m.published_at FROM fanout_data.%1$I m
              WHERE m.txid = ANY ($6) AND (m.txid, m.id) > ($2, $3) AND m.id >= $4 %2$s LIMIT $5)
             UNION ALL
             (SELECT m.published_at FROM fanout_data.%1$I m
              WHERE m.txid = ANY ($7) AND NOT pg_visible_in_snapshot(m.txid, $8)
                AND (m.txid, m.id) <= ($2, $3) %2$s LIMIT $5)) u', v_table, v_filter)
        INTO messages, oldest_published_at
        USING pg_snapshot_xmax(v_g.win_lo), v_g.cur_txid, v_g.cur_id,
              CASE WHEN pg_snapshot_xmax(v_g.win_lo) = '1' THEN coalesce(v_g.effective_start_id, 0) ELSE 0 END,
              p_limit, ARRAY(SELECT pg_snapshot_xip(v_g.win_lo)), ARRAY(SELECT pg_snapshot_xip(v_g.win_hi)),
              v_g.win_lo, pg_snapshot_xmax(v_g.win_hi);
END
$fn$;
