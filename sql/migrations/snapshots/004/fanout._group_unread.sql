-- fanout._group_unread(p_group_id, p_limit, p_relname): what the group's
-- stream has not handed out yet: how many committed messages (each of the
-- three parts below stops at p_limit; NULL = count all) and when the oldest
-- of them was published. p_relname restricts the count to one partition of
-- the topic (NULL = the whole topic). Messages before the group's start do
-- not count (in its first window only: see fanout._window_walk), nor in reference mode
-- messages that do not require the group (on a topic switched to
-- reference, from its switch id on: below it every message counts).
-- Only while the topic is in reference mode: a group keeps its bit while a
-- switch to offset is in progress, but the topic's page functions read
-- every row by position from that switch on, and rows from before an
-- earlier switch to reference carry no bits at all (counted with the bit,
-- they made the group look caught up and fanout._group_idle hand out none
-- of them until maintenance finished the switch).
-- Unread are, disjointly:
--   (a) txid >= xmax(lo) and (txid, id) after the cursor (one range scan);
--   (b) txid running at lo, after the cursor (point look-ups);
--   (c) txid running at hi (so skipped by the window scan), not visible in
--       lo, at or before the cursor: the next window delivers them.
-- It counts partition by partition, without scanning those whose rows all
-- lie in earlier windows (txid_bound at or below the xmin of lo: none
-- unread) or, in offset mode (and below a switch to reference), all lie after the cursor and the start (a
-- summarized partition, fanout._summarize_partitions: all row_count unread). So a
-- group that has not reached a closed partition costs a look-up, not a
-- count: the fanout.groups view and cleanup stay cheap with many lagging
-- groups. Only partitions the group is inside are counted row by row.
-- A partition that no id has been handed out for yet (its lo_id above the
-- topic's sequence: the one kept ready ahead of the open one) holds no row
-- and is not counted: no query on a table the view would otherwise open and
-- lock for nothing (one per topic). The query leaves out the parts of the
-- window that are empty: (b) and (c) when the window's snapshots had no
-- transaction running (the common case), the start condition before the
-- group's first window ends. A query on a table the session has not opened
-- yet costs far more than its index scan (planning, catalog look-ups,
-- locks), so the fanout.groups view at 1,000 topics depends on both.
-- On a partitioned topic the count is the sum over the group's key
-- partitions, each at its own cursor (fanout.kpart; a partition without a
-- cursor yet is at the group's position), without the summary short-cut
-- (a summary counts every key partition); p_kpart restricts it to one.
-- Reads fanout.consumer_group, fanout.kpart, fanout.partition, the topic's
-- message table and its id sequence.
CREATE OR REPLACE FUNCTION fanout._group_unread(
    p_group_id bigint, p_limit bigint DEFAULT NULL, p_relname text DEFAULT NULL, p_kpart int DEFAULT NULL,
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
    v_g       fanout.consumer_group;
    v_filter  text := '';
    v_switch  bigint;
    v_p       fanout.partition;
    v_lo_xmax xid8;
    v_start   bigint;
    v_n       bigint;
    v_oldest  timestamptz;
    v_sql     text;
    v_parts   int;
    v_k       record;
    v_kfilter text;
    v_last    bigint;
    v_lo_xip  xid8[];
    v_hi_xip  xid8[];
    v_ref     boolean;
BEGIN
    SELECT * INTO STRICT v_g FROM fanout.consumer_group g WHERE g.group_id = p_group_id;
    SELECT t.partitions, pg_sequence_last_value(format('fanout_data.%I', t.seq_name)::regclass),
           CASE WHEN t.completion = 'reference' THEN t.completion_switch_id END, t.completion = 'reference'
    INTO v_parts, v_last, v_switch, v_ref
    FROM fanout.topic t WHERE t.topic_id = v_g.topic_id;
    IF v_g.bit_no IS NOT NULL AND v_ref THEN
        -- Switched from offset completion: rows below the switch id carry
        -- no bits, every group reads them (fanout._create_page_functions).
        v_filter := format(' AND (%s(m.required_groups & %L::bigint) <> 0)',
                           CASE WHEN v_switch IS NOT NULL THEN format('m.id < %s::bigint OR ', v_switch) ELSE '' END,
                           1::bigint << v_g.bit_no);
    END IF;
    messages := 0;
    -- One position (the group's), or one per key partition.
    FOR v_k IN
        SELECT NULL::int AS kpart, v_g.win_lo AS win_lo, v_g.win_hi AS win_hi, v_g.cur_txid AS cur_txid,
               v_g.cur_id AS cur_id
        WHERE v_parts IS NULL
        UNION ALL
        SELECT s, coalesce(k.win_lo, v_g.win_lo), coalesce(k.win_hi, v_g.win_hi),
               coalesce(k.cur_txid, v_g.cur_txid), coalesce(k.cur_id, v_g.cur_id)
        FROM generate_series(0, v_parts - 1) AS s
        LEFT JOIN fanout.kpart k ON k.group_id = p_group_id AND k.kpart = s
        WHERE v_parts IS NOT NULL AND (p_kpart IS NULL OR s = p_kpart)
    LOOP
    v_g.win_lo := v_k.win_lo;
    v_g.win_hi := v_k.win_hi;
    v_g.cur_txid := v_k.cur_txid;
    v_g.cur_id := v_k.cur_id;
    v_lo_xmax := pg_snapshot_xmax(v_g.win_lo);
    v_start := CASE WHEN v_lo_xmax = '1' THEN coalesce(v_g.effective_start_id, 0) ELSE 0 END;
    v_kfilter := v_filter || CASE WHEN v_k.kpart IS NULL THEN '' ELSE format(' AND m.kpart = %s', v_k.kpart) END;
    v_lo_xip := ARRAY(SELECT pg_snapshot_xip(v_g.win_lo));
    v_hi_xip := ARRAY(SELECT pg_snapshot_xip(v_g.win_hi));
    -- (a), then (b) and (c) where the window's snapshots make them
    -- non-empty; ids start at 1, so v_start 0 asks nothing of (a).
    v_sql := 'SELECT count(*), min(u.published_at) FROM (
             (SELECT m.published_at FROM fanout_data.%1$I m
              WHERE m.txid >= $1 AND (m.txid, m.id) > ($2, $3)'
             || CASE WHEN v_start = 0 THEN ''
                     WHEN cardinality(v_hi_xip) = 0 THEN ' AND (m.id >= $4 OR m.txid >= $9)'
                     ELSE ' AND (m.id >= $4 OR m.txid >= $9 OR m.txid = ANY ($7))' END
             || ' %2$s LIMIT $5)'
             || CASE WHEN cardinality(v_lo_xip) = 0 THEN '' ELSE '
             UNION ALL
             (SELECT m.published_at FROM fanout_data.%1$I m
              WHERE m.txid = ANY ($6) AND (m.txid, m.id) > ($2, $3) AND m.id >= $4 %2$s LIMIT $5)' END
             || CASE WHEN cardinality(v_hi_xip) = 0 THEN '' ELSE '
             UNION ALL
             (SELECT m.published_at FROM fanout_data.%1$I m
              WHERE m.txid = ANY ($7) AND NOT pg_visible_in_snapshot(m.txid, $8)
                AND (m.txid, m.id) <= ($2, $3) %2$s LIMIT $5)' END
             || ') u';
    FOR v_p IN
        SELECT * FROM fanout.partition p
        WHERE p.topic_id = v_g.topic_id AND p.truncated_at IS NULL
          AND (p_relname IS NULL OR p.relname = p_relname)
        ORDER BY p.part_no
    LOOP
        IF v_p.txid_bound IS NOT NULL AND v_p.txid_bound <= pg_snapshot_xmin(v_g.win_lo) THEN
            CONTINUE;  -- every row was in an earlier window
        END IF;
        IF v_last IS NOT NULL AND v_p.lo_id > v_last THEN
            -- No id of it handed out yet (the sequence is read after this
            -- statement's snapshot: a row it could see has a lower id).
            CONTINUE;
        END IF;
        IF (v_g.bit_no IS NULL OR NOT v_ref OR v_p.hi_id <= v_switch) AND v_k.kpart IS NULL AND v_p.row_count IS NOT NULL AND v_p.first_txid >= v_lo_xmax
           AND (v_p.first_txid, v_p.first_id) > (v_g.cur_txid, v_g.cur_id)
           AND v_p.lo_id >= v_start THEN
            -- Not reached yet: every row is unread (all of them in part (a)).
            v_n := v_p.row_count;
            v_oldest := v_p.oldest_published_at;
        ELSE
            EXECUTE format(v_sql, v_p.relname, v_kfilter)
                INTO v_n, v_oldest
                USING v_lo_xmax, v_g.cur_txid, v_g.cur_id, v_start,
                      p_limit, v_lo_xip, v_hi_xip, v_g.win_lo, pg_snapshot_xmax(v_g.win_hi);
        END IF;
        messages := messages + v_n;
        oldest_published_at := least(oldest_published_at, v_oldest);
        IF p_limit IS NOT NULL AND messages >= p_limit THEN
            messages := p_limit;
            EXIT;
        END IF;
    END LOOP;
    EXIT WHEN p_limit IS NOT NULL AND messages >= p_limit;
    END LOOP;
END
$fn$;
