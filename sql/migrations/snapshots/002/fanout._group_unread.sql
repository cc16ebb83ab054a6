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
-- On a partitioned topic: the sum over its key partitions' cursors
-- (fanout.kpart). Reads fanout.consumer_group, fanout.kpart and the topic's
-- message table.
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
    v_parts  int;
    v_k      record;
    v_m      bigint;
    v_o      timestamptz;
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
    SELECT t.partitions INTO v_parts FROM fanout.topic t WHERE t.topic_id = v_g.topic_id;
    IF v_parts IS NOT NULL THEN
        -- Partitioned topic: the sum over the key partitions' cursors (a
        -- partition without one yet is at the group's position).
        messages := 0;
        FOR v_k IN
            SELECT s AS kpart, coalesce(k.win_lo, v_g.win_lo) AS win_lo, coalesce(k.win_hi, v_g.win_hi) AS win_hi,
                   coalesce(k.cur_txid, v_g.cur_txid) AS cur_txid, coalesce(k.cur_id, v_g.cur_id) AS cur_id
            FROM generate_series(0, v_parts - 1) AS s
            LEFT JOIN fanout.kpart k ON k.group_id = p_group_id AND k.kpart = s
        LOOP
            v_g.win_lo := v_k.win_lo;
            v_g.win_hi := v_k.win_hi;
            v_g.cur_txid := v_k.cur_txid;
            v_g.cur_id := v_k.cur_id;
            SELECT u.messages, u.oldest_published_at INTO v_m, v_o
            FROM fanout._group_unread_at(v_g, v_table, v_filter || format(' AND m.kpart = %s', v_k.kpart), p_limit) u;
            messages := messages + v_m;
            oldest_published_at := least(oldest_published_at, v_o);
            EXIT WHEN p_limit IS NOT NULL AND messages >= p_limit;
        END LOOP;
        RETURN;
    END IF;
    SELECT u.messages, u.oldest_published_at INTO messages, oldest_published_at
    FROM fanout._group_unread_at(v_g, v_table, v_filter, p_limit) u;
END
$fn$;
