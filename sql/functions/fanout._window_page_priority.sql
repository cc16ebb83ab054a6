-- fanout._window_page_priority(p_group_id, p_topic_id, p_table, p_limit,
-- p_max_bytes): fanout._window_scan for prioritized topics (a message was
-- published with priority > 0): the same snapshot windows, but each window is
-- read by priority level, 9 down to 0, and each level in (txid, id) order.
-- A window's set of messages is fixed when it opens, so any total order of
-- it can carry a cursor: here (level, txid, id), kept in the group's
-- prio_level, prio_txid, prio_id. Levels above 0 are read through the
-- partial index (priority, txid, id); level 0 (stored as NULL) through the
-- (txid, id) index, skipping the rows of higher levels (each at most once
-- per window). While a window is read by priority, (cur_txid, cur_id) stays
-- where the window began (messages at or before it were handed out earlier
-- in commit order), so fanout._group_unread, cleanup and message_status
-- count the window as unread until it is used up: conservative, never
-- losing. When the window is used up, the cursor moves to its end
-- (xmax(hi), 0) and the next window opens as in fanout._window_scan.
-- Starvation bound: messages committed after a window opened go to a later
-- window, so a message is overtaken only by higher-priority messages of its
-- own window (at most what was committed before its window opened).
-- Everything else (start cut-off, partition floor, reference-mode filter and
-- stamp reconciliation, byte budget with fanout._page_fit, deferral of
-- delayed messages) is that of fanout._window_scan. The scans are the
-- topic's generated m<id>_page_prio (fanout._create_page_functions), planned
-- once per session. Writes the group's prio_* columns itself; returns
-- the rest like fanout._window_scan.
-- Reads fanout.consumer_group, fanout.partition, fanout.stamp_pending and the
-- topic's message table; writes fanout.consumer_group (prio_*), fanout.retry.
CREATE OR REPLACE FUNCTION fanout._window_page_priority(
    p_group_id bigint, p_topic_id bigint, p_table text, p_limit int, p_max_bytes bigint,
    OUT o_ids bigint[], OUT o_txids xid8[],
    OUT o_lo pg_snapshot, OUT o_hi pg_snapshot, OUT o_cur_txid xid8, OUT o_cur_id bigint,
    OUT o_changed boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
SET enable_bitmapscan = off
SET enable_seqscan = off
SET enable_sort = off
SET jit = off
AS $fn$
DECLARE
    v_left    int := p_limit;
    v_rounds  int := 0;
    v_lvl     int;
    v_ptx     xid8;
    v_pid     bigint;
    v_old_lvl int;
    v_old_ptx xid8;
    v_old_pid bigint;
    v_lo_xmax xid8;
    v_lo_xip  xid8[];
    v_hi_xip  xid8[];
    v_ids     bigint[];
    v_txids   xid8[];
    v_da      timestamptz[];
    v_deliver timestamptz[] := '{}';
    v_now     timestamptz := clock_timestamp();
    v_got     int;
    v_min_id  bigint;
    v_new     pg_snapshot;
    v_start   bigint;
    v_bit     int;
    v_mask    bigint := 0;
    v_bytes   bigint := coalesce(p_max_bytes, 9223372036854775807);
    v_used    bigint;
    v_sz      int[];
    v_cut     boolean := false;
    v_phase   int;
    v_running xid8[];
    -- One page of one level (arrays in (txid, id) order, each row's size,
    -- the bytes): $1 the level, $2 running txids (phase 1) or NULL (phase 2),
    -- $3 xmax(hi), $4 txids running at hi, $5/$6 the level's cursor, $7 the
    -- lowest id, $8 the limit, $9 the reference-mode mask.
    v_page    text := format('SELECT * FROM fanout_data.%I($1, $2, $3, $4, $5, $6, $7, $8, $9)', p_table || '_page_prio');
    v_full    boolean := false;
    v_pages   int := 0;
    -- Pages of nothing but delayed messages one call reads past: 10,000
    -- messages, at least 10 pages and at most 100.
    v_max_pages int := greatest(10, least(100, 10000 / greatest(p_limit, 1)));
BEGIN
    SELECT g.win_lo, g.win_hi, g.cur_txid, g.cur_id, coalesce(g.effective_start_id, 0), g.bit_no,
           g.prio_level, g.prio_txid, g.prio_id
    INTO o_lo, o_hi, o_cur_txid, o_cur_id, v_start, v_bit, v_lvl, v_ptx, v_pid
    FROM fanout.consumer_group g WHERE g.group_id = p_group_id;
    v_old_lvl := v_lvl;
    v_old_ptx := v_ptx;
    v_old_pid := v_pid;
    IF v_lvl IS NULL THEN
        -- The window so far was read in commit order up to the cursor.
        v_lvl := 9;
        v_ptx := o_cur_txid;
        v_pid := o_cur_id;
    END IF;
    IF v_bit IS NOT NULL THEN
        v_mask := 1::bigint << v_bit;
        PERFORM fanout._reconcile_stamps(p_topic_id, o_hi);
    END IF;
    IF pg_snapshot_xmax(o_lo) <> '1' THEN
        v_start := 0;
    END IF;
    o_ids := '{}';
    o_txids := '{}';
    o_changed := false;
    <<pages>>
    LOOP
        <<windows>>
        LOOP
            v_lo_xmax := pg_snapshot_xmax(o_lo);
            v_hi_xip := ARRAY(SELECT pg_snapshot_xip(o_hi));
            WHILE v_lvl >= 0 LOOP
                -- Phase 1: transactions running at lo that committed by hi;
                -- phase 2: the txid range [xmax(lo), xmax(hi)), skipping what hi
                -- saw running.
                FOR v_phase IN 1..2 LOOP
                    IF v_phase = 1 THEN
                        CONTINUE WHEN v_ptx >= v_lo_xmax;
                        v_running := ARRAY(SELECT x FROM pg_snapshot_xip(o_lo) AS x
                                           WHERE x >= v_ptx AND pg_visible_in_snapshot(x, o_hi) ORDER BY x);
                        IF cardinality(v_running) = 0 THEN
                            v_ptx := v_lo_xmax;
                            v_pid := 0;
                            CONTINUE;
                        END IF;
                        v_min_id := greatest(v_start, fanout._partition_floor(p_topic_id, v_running[1]));
                    ELSE
                        CONTINUE WHEN v_ptx >= pg_snapshot_xmax(o_hi);
                        v_running := NULL;
                        v_min_id := greatest(v_start, fanout._partition_floor(p_topic_id, v_ptx));
                    END IF;
                    EXECUTE v_page INTO v_ids, v_txids, v_da, v_sz, v_used
                        USING v_lvl, v_running, pg_snapshot_xmax(o_hi), v_hi_xip, v_ptx, v_pid, v_min_id, v_left, v_mask;
                    v_got := coalesce(cardinality(v_ids), 0);
                    v_cut := false;
                    IF v_used > v_bytes THEN
                        v_got := fanout._page_fit(v_sz, v_bytes, cardinality(o_ids) = 0);
                        v_cut := v_got < cardinality(v_ids);
                        v_ids := v_ids[1:v_got]; v_txids := v_txids[1:v_got]; v_da := v_da[1:v_got];
                        v_used := (SELECT sum(x) FROM unnest(v_sz[1:v_got]) AS x);
                    END IF;
                    v_bytes := v_bytes - coalesce(v_used, 0);
                    IF v_got > 0 THEN
                        o_ids := o_ids || v_ids;
                        o_txids := o_txids || v_txids;
                        v_deliver := v_deliver || v_da;
                        v_ptx := v_txids[v_got];
                        v_pid := v_ids[v_got];
                        v_left := v_left - v_got;
                    END IF;
                    IF v_left = 0 OR v_cut THEN
                        v_full := true;
                        EXIT windows;
                    END IF;
                    IF v_phase = 1 THEN
                        v_ptx := v_lo_xmax;
                        v_pid := 0;
                    END IF;
                END LOOP;
                -- This level is used up: the next one starts where the window's
                -- commit-order part ended.
                v_lvl := v_lvl - 1;
                v_ptx := o_cur_txid;
                v_pid := o_cur_id;
            END LOOP;

            -- The window is used up: its cursor moves to its end.
            IF o_cur_txid < pg_snapshot_xmax(o_hi) OR o_cur_id <> 0 THEN
                o_cur_txid := pg_snapshot_xmax(o_hi);
                o_cur_id := 0;
                o_changed := true;
            END IF;
            v_lvl := 9;
            v_ptx := o_cur_txid;
            v_pid := o_cur_id;
            EXIT WHEN v_rounds >= 2;
            v_new := fanout._next_window(p_topic_id, v_bit, o_hi);
            EXIT WHEN v_new::text = o_hi::text;
            o_lo := o_hi;
            o_hi := v_new;
            o_cur_txid := '0';
            o_cur_id := 0;
            o_changed := true;
            v_rounds := v_rounds + 1;
            v_start := 0;
            v_lvl := 9;
            v_ptx := o_cur_txid;
            v_pid := o_cur_id;
        END LOOP;

        -- Delayed messages not due yet wait in the retry table (as in fanout._window_scan).
        IF EXISTS (SELECT 1 FROM unnest(v_deliver) AS d WHERE d > v_now) THEN
            INSERT INTO fanout.retry (group_id, message_id, txid, attempt, not_before)
            SELECT p_group_id, u.id, u.tx, 0, u.d
            FROM unnest(o_ids, o_txids, v_deliver) AS u(id, tx, d)
            WHERE u.d > v_now
            ON CONFLICT DO NOTHING;
            SELECT coalesce(array_agg(u.id ORDER BY u.ord), '{}'), coalesce(array_agg(u.tx ORDER BY u.ord), '{}')
            INTO o_ids, o_txids
            FROM unnest(o_ids, o_txids, v_deliver) WITH ORDINALITY AS u(id, tx, d, ord)
            WHERE u.d IS NULL OR u.d <= v_now;
            -- A full page of delayed messages only: read on from the cursor
            -- (as in fanout._window_scan).
            IF cardinality(o_ids) = 0 AND v_full AND v_pages < v_max_pages - 1 THEN
                v_pages := v_pages + 1;
                v_left := p_limit;
                v_bytes := coalesce(p_max_bytes, 9223372036854775807);
                v_deliver := '{}';
                v_full := false;
                CONTINUE pages;
            END IF;
        END IF;
        EXIT pages;
    END LOOP;

    -- The priority cursor: NULL once the window is used up.
    IF NOT v_full THEN
        v_lvl := NULL;
        v_ptx := NULL;
        v_pid := NULL;
    END IF;
    IF v_lvl IS DISTINCT FROM v_old_lvl OR v_ptx IS DISTINCT FROM v_old_ptx OR v_pid IS DISTINCT FROM v_old_pid THEN
        UPDATE fanout.consumer_group g SET prio_level = v_lvl, prio_txid = v_ptx, prio_id = v_pid
        WHERE g.group_id = p_group_id;
        o_changed := true;
    END IF;
END
$fn$;
