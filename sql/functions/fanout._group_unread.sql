-- fanout._group_unread(p_group_id, p_limit, p_relname): what the group's
-- stream has not handed out yet: how many committed messages (each of the
-- three parts below stops at p_limit; NULL = count all) and when the oldest
-- of them was published. p_relname restricts the count to one partition of
-- the topic (NULL = the whole topic). Messages before the group's start do
-- not count (in its first window only: see fanout._window_page), nor in reference mode
-- messages that do not require the group.
-- Unread are, disjointly:
--   (a) txid >= xmax(lo) and (txid, id) after the cursor (one range scan);
--   (b) txid running at lo, after the cursor (point look-ups);
--   (c) txid running at hi (so skipped by the window scan), not visible in
--       lo, at or before the cursor: the next window delivers them.
-- Reads fanout.consumer_group and the topic's message table.
CREATE OR REPLACE FUNCTION fanout._group_unread(
    p_group_id bigint, p_limit bigint DEFAULT NULL, p_relname text DEFAULT NULL,
    OUT messages bigint, OUT oldest_published_at timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
-- Pages must be ordered index scans that stop after LIMIT rows, whatever the
-- (often missing) statistics of young partitions make the planner guess
-- (and the disabled-path costs must not trigger JIT compilation).
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $fn$
DECLARE
    v_g     fanout.consumer_group;
    v_table text;
    v_filter text := '';
BEGIN
    SELECT * INTO STRICT v_g FROM fanout.consumer_group g WHERE g.group_id = p_group_id;
    IF v_g.bit_no IS NOT NULL THEN
        v_filter := format(' AND (m.required_groups & %L::bigint) <> 0', 1::bigint << v_g.bit_no);
    END IF;
    IF p_relname IS NULL THEN
        SELECT t.data_table INTO STRICT v_table FROM fanout.topic t WHERE t.topic_id = v_g.topic_id;
    ELSE
        v_table := p_relname;
    END IF;
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
