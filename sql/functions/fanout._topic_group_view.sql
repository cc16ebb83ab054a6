-- fanout._topic_group_view(p_topic_id): fanout._group_view for every group
-- of one topic, one row per group: unread messages, the oldest publish time
-- of those (and of messages waiting for their sequence's turn) and the last
-- sign of life. What fanout.groups reads, once per topic.
-- The common groups (offset mode, no key partitions, nothing waiting for
-- its sequence's turn) are counted together: one statement per topic whose per-group part is a
-- parameterized index scan of each storage partition, where
-- fanout._group_unread plans one statement per group and partition (10,000
-- groups of one topic planned 10,000 statements). It gives the same counts:
-- partitions every row of which lay in a group's earlier windows count 0,
-- summarized ones the group has not reached their row_count, and partitions
-- no id has been handed out for yet are left out (fanout._group_unread has
-- the rules). The other groups go through fanout._group_view one by one.
-- Returns nothing for a topic that does not exist or that the caller may
-- not consume (the wrapper is granted; calling it reveals nothing the view
-- hides).
-- Tables: fanout.topic, fanout.consumer_group, fanout.partition,
-- fanout.seq_wait, fanout.member, fanout_data.* (and, through
-- fanout._group_view, what it reads).
CREATE OR REPLACE FUNCTION fanout._topic_group_view(p_topic_id bigint)
RETURNS TABLE(group_id bigint, messages bigint, oldest_published_at timestamptz, last_heartbeat timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER
-- A few groups a topic, not the default 1000 rows: with 1000, the groups
-- view's plan (a dozen subqueries per row) was estimated above
-- jit_inline_above_cost and JIT-compiled, seconds on a loaded server for a
-- handful of rows (the sidecar's 5 s stats timeout ran out).
ROWS 4
SET search_path = pg_catalog, fanout, pg_temp
-- As fanout._group_unread: ordered index scans, whatever the statistics.
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    v_t     fanout.topic;
    v_batch bigint[];
    v_last  bigint;
    v_p     fanout.partition;
    v_parts text := '';
    v_lo    boolean;  -- some batched group's window starts at a snapshot with transactions running
    v_hi    boolean;  -- ends at one
    v_sum   text;
BEGIN
    SELECT * INTO v_t FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    IF v_t.topic_id IS NULL OR NOT fanout._may(v_t.topic, 'consume') THEN
        RETURN;
    END IF;
    IF v_t.partitions IS NULL THEN
        SELECT array_agg(g.group_id),
               bool_or(EXISTS (SELECT 1 FROM pg_snapshot_xip(g.win_lo))),
               bool_or(EXISTS (SELECT 1 FROM pg_snapshot_xip(g.win_hi)))
        INTO v_batch, v_lo, v_hi
        FROM fanout.consumer_group g
        WHERE g.topic_id = p_topic_id AND g.bit_no IS NULL
          AND NOT EXISTS (SELECT 1 FROM fanout.seq_wait w WHERE w.group_id = g.group_id);
        -- A statement for all costs more to plan than a few small ones.
        IF cardinality(v_batch) < 8 THEN
            v_batch := NULL;
        END IF;
    END IF;
    IF v_batch IS NOT NULL THEN
        v_last := pg_sequence_last_value(format('fanout_data.%I', v_t.seq_name)::regclass);
        FOR v_p IN
            SELECT * FROM fanout.partition p
            WHERE p.topic_id = p_topic_id AND p.truncated_at IS NULL
            ORDER BY p.part_no
        LOOP
            CONTINUE WHEN v_last IS NOT NULL AND v_p.lo_id > v_last;  -- no id of it handed out yet
            -- Per group u: nothing when every row lay in its earlier windows
            -- (the bound), the summary's row_count when it has not reached
            -- the partition, else parts (a), (b) and (c) of _group_unread
            -- ((b) and (c) only where some window's snapshots had
            -- transactions running: a query without them plans faster).
            v_sum := CASE WHEN v_p.row_count IS NULL THEN 'false' ELSE format(
                '(%1$L::xid8 >= u.lo_xmax AND (%1$L::xid8, %2$L::bigint) > (u.cur_txid, u.cur_id) AND %3$L::bigint >= u.start)',
                v_p.first_txid, v_p.first_id, v_p.lo_id) END;
            v_parts := v_parts || format($q$
                UNION ALL
                SELECT count(*), min(m.published_at) FROM fanout_data.%1$I m
                WHERE NOT coalesce(%2$L::xid8 <= u.lo_xmin, false) AND NOT coalesce(%3$s, false)
                  AND m.txid >= u.lo_xmax AND (m.txid, m.id) > (u.cur_txid, u.cur_id)
                  AND (u.start = 0 OR m.id >= u.start OR m.txid >= u.hi_xmax%4$s)$q$,
                v_p.relname, v_p.txid_bound, v_sum, CASE WHEN v_hi THEN ' OR m.txid = ANY (u.hi_xip)' ELSE '' END);
            IF v_lo THEN
                v_parts := v_parts || format($q$
                UNION ALL
                SELECT count(*), min(m.published_at) FROM fanout_data.%1$I m
                WHERE NOT coalesce(%2$L::xid8 <= u.lo_xmin, false) AND NOT coalesce(%3$s, false)
                  AND cardinality(u.lo_xip) > 0
                  AND m.txid = ANY (u.lo_xip) AND (m.txid, m.id) > (u.cur_txid, u.cur_id) AND m.id >= u.start$q$,
                v_p.relname, v_p.txid_bound, v_sum);
            END IF;
            IF v_hi THEN
                v_parts := v_parts || format($q$
                UNION ALL
                SELECT count(*), min(m.published_at) FROM fanout_data.%1$I m
                WHERE NOT coalesce(%2$L::xid8 <= u.lo_xmin, false) AND NOT coalesce(%3$s, false)
                  AND cardinality(u.hi_xip) > 0
                  AND m.txid = ANY (u.hi_xip) AND NOT pg_visible_in_snapshot(m.txid, u.win_lo)
                  AND (m.txid, m.id) <= (u.cur_txid, u.cur_id)$q$,
                v_p.relname, v_p.txid_bound, v_sum);
            END IF;
            IF v_p.row_count IS NOT NULL THEN
                v_parts := v_parts || format($q$
                UNION ALL
                SELECT %1$L::bigint, %2$L::timestamptz
                WHERE NOT coalesce(%3$L::xid8 <= u.lo_xmin, false) AND coalesce(%4$s, false)$q$,
                v_p.row_count, v_p.oldest_published_at, v_p.txid_bound, v_sum);
            END IF;
        END LOOP;
        RETURN QUERY EXECUTE format($q$
            SELECT g.group_id, c.n, c.oldest,
                   greatest(g.last_heartbeat, g.last_read_at, g.created_at, g.status_changed_at,
                            (SELECT max(m.last_seen) FROM fanout.member m WHERE m.group_id = g.group_id))  -- fanout._liveness
            FROM fanout.consumer_group g
            CROSS JOIN LATERAL (SELECT pg_snapshot_xmax(g.win_lo) AS lo_xmax, pg_snapshot_xmin(g.win_lo) AS lo_xmin,
                                       g.cur_txid, g.cur_id, pg_snapshot_xmax(g.win_hi) AS hi_xmax, g.win_lo,
                                       ARRAY(SELECT pg_snapshot_xip(g.win_lo)) AS lo_xip,
                                       ARRAY(SELECT pg_snapshot_xip(g.win_hi)) AS hi_xip,
                                       CASE WHEN pg_snapshot_xmax(g.win_lo) = '1'
                                            THEN coalesce(g.effective_start_id, 0) ELSE 0 END AS start) u
            CROSS JOIN LATERAL (SELECT coalesce(sum(x.n), 0)::bigint AS n, min(x.oldest) AS oldest
                                FROM (SELECT 0::bigint AS n, NULL::timestamptz AS oldest WHERE false %s) x) c
            WHERE g.group_id = ANY ($1)$q$, v_parts)
        USING v_batch;
    END IF;
    RETURN QUERY
    SELECT g.group_id, v.messages, v.oldest_published_at, v.last_heartbeat
    FROM fanout.consumer_group g
    CROSS JOIN LATERAL fanout._group_view(g.group_id) v
    WHERE g.topic_id = p_topic_id AND g.group_id <> ALL (coalesce(v_batch, '{}'));
END
$fn$;
