-- fanout._window_walk(p_group_id, p_topic_id, p_table, p_kpart, p_whole,
-- p_prio, p_limit, p_max_bytes, p_lo, p_hi, p_cur_txid, p_cur_id, p_start,
-- p_bit, p_plvl, p_ptx, p_pid): the next page of at most p_limit messages
-- of a stream position, and of at most p_max_bytes bytes (NULL: no limit;
-- sizes as fanout._create_page_functions measures them) except that the
-- first message of a page always comes. The one window walker of every
-- ordering: the whole stream or one key partition (p_kpart), commit order
-- or priority levels (p_prio), with the byte bound, delayed messages and
-- whole transactions (p_whole). The position is passed in and returned
-- (o_*, o_changed when it moved); the caller holds the row it came from (the
-- group's, fanout.read, or the key partition's, fanout._kpart_claim) and
-- writes it back.
--
-- A position is a snapshot window (lo, hi) and a cursor (cur_txid, cur_id).
-- The window holds the messages whose txid is visible in hi but not in lo:
-- first the txids that were still running at lo (phase 1, point look-ups),
-- then the txid range [xmax(lo), xmax(hi)) (phase 2, one index range scan),
-- both in (txid, id) order from the cursor. When the window is used up, the
-- next one is opened (fanout._next_window: lo := hi, hi := now, reference
-- holds applied): no ticker, and a transaction that stays open only delays
-- its own messages; at most two new windows per call. Every page is an
-- index scan of the topic's m<id>_page that stops after p_limit rows.
-- Messages below p_start (the group's effective_start_id) are skipped in its
-- first window only (lo is the origin '1:1:'). Closed partitions that cannot
-- hold the scanned txids are skipped, and in reference mode (p_bit)
-- messages that do not require the group (stale stamps reconciled first).
-- Priority (p_prio, once the topic has priorities): each window is read by
-- level, 9 down to 0, each level in (txid, id) order from the level cursor
-- (p_plvl, p_ptx, p_pid; NULL: the window's commit-order part ends at the
-- cursor). A window's set of messages is fixed when it opens, so any total
-- order of it can carry a cursor. Meanwhile (cur_txid, cur_id) stays where
-- the window began, so every "unread" check stays conservative; when the
-- window is used up the cursor moves to its end (xmax(hi), 0) and the level
-- cursor is NULL. A message is overtaken only by higher levels of its own
-- window.
-- p_whole (whole_transactions): a page that ends (by p_limit or by bytes)
-- inside one producer transaction's messages is extended to the end of that
-- transaction, at its level (fanout._page_finish_tx).
-- Delayed messages (deliver_at in the future) are passed by the cursor and
-- wait in the group's retry table (fanout._page_defer); a full page of
-- nothing but them is followed by the next one (up to 10,000 messages a
-- call: at least 10 pages, at most 100).
-- Subscription filter (p_filter, the group's: fanout.subscribe, set_filter):
-- each scanned page is checked against it (in the page's own scan; the
-- rest of a whole transaction by fanout._filter_match) and only
-- the messages whose headers contain it are kept; the cursor passes the
-- others as if they were acked (reference mode: the group is done with
-- them, fanout._complete_bits), o_filtered counts them. A scan that kept
-- less than it read goes on from its cursor, up to 10,000 scanned messages
-- a call (then the page may be short or empty, the position moved on).
-- p_prio_ends (priorities dropped, fanout.alter_topic): the window being
-- read by priority is finished so, and the windows after it are read in
-- commit order.
-- Returns the page as ids and txids (the caller returns the rows once the
-- page is settled, m<id>_rows). Reads fanout.partition and the topic's
-- message table; writes fanout.retry, fanout.event_log and, through
-- fanout._reconcile_stamps, reference-mode stamps.
CREATE OR REPLACE FUNCTION fanout._window_walk(
    p_group_id bigint, p_topic_id bigint, p_table text, p_kpart int, p_whole boolean, p_prio boolean,
    p_limit int, p_max_bytes bigint,
    p_lo pg_snapshot, p_hi pg_snapshot, p_cur_txid xid8, p_cur_id bigint, p_start bigint, p_bit int,
    p_plvl smallint, p_ptx xid8, p_pid bigint,
    OUT o_ids bigint[], OUT o_txids xid8[],
    OUT o_lo pg_snapshot, OUT o_hi pg_snapshot, OUT o_cur_txid xid8, OUT o_cur_id bigint,
    OUT o_plvl smallint, OUT o_ptx xid8, OUT o_pid bigint, OUT o_changed boolean, OUT o_filtered int,
    p_filter jsonb DEFAULT NULL, p_prio_ends boolean DEFAULT false)
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    c_max     constant bigint := 9223372036854775807;
    v_left    int := p_limit;
    v_bytes   bigint := coalesce(p_max_bytes, c_max);  -- budget left
    v_rounds  int := 0;
    v_pages   int := 0;
    v_max_pages int := greatest(10, least(100, 10000 / greatest(p_limit, 1)));
    v_lvl     int := CASE WHEN p_prio THEN coalesce(p_plvl, 9) END;  -- NULL: commit order
    v_ptx     xid8 := CASE WHEN p_prio AND p_plvl IS NOT NULL THEN p_ptx ELSE p_cur_txid END;
    v_pid     bigint := CASE WHEN p_prio AND p_plvl IS NOT NULL THEN p_pid ELSE p_cur_id END;
    v_start   bigint := CASE WHEN pg_snapshot_xmax(p_lo) = '1' THEN coalesce(p_start, 0) ELSE 0 END;
    v_mask    bigint := coalesce(1::bigint << p_bit, 0);
    v_page    text := format('SELECT * FROM fanout_data.%I($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)',
                             p_table || '_page');
    v_run xid8[]; v_ids bigint[]; v_txids xid8[]; v_da timestamptz[]; v_sz int[]; v_used bigint;
    v_got int; v_min_id bigint; v_new pg_snapshot; v_phase int; v_full boolean := false;
    v_deliver timestamptz[] := '{}'; v_now timestamptz := clock_timestamp();
    v_prio    boolean := p_prio;  -- false once a window read by priority ends with p_prio_ends
    v_match   boolean[]; v_more boolean; v_cut int; v_keep int[];
    v_scanned int := 0;           -- messages scanned against p_filter
    v_skip_ids bigint[] := '{}'; v_skip_txids xid8[] := '{}';
BEGIN
    o_lo := p_lo; o_hi := p_hi; o_cur_txid := p_cur_txid; o_cur_id := p_cur_id;
    o_ids := '{}'; o_txids := '{}';
    IF p_bit IS NOT NULL THEN
        PERFORM fanout._reconcile_stamps(p_topic_id, o_hi);
    END IF;
    <<pages>> LOOP
        <<windows>> LOOP
            LOOP  -- the levels (one pass in commit order)
                -- Phase 1: transactions running at lo that committed by hi;
                -- phase 2: [xmax(lo), xmax(hi)), skipping what hi saw running.
                FOR v_phase IN 1..2 LOOP
                    IF v_phase = 1 THEN
                        CONTINUE WHEN v_ptx >= pg_snapshot_xmax(o_lo);
                        v_run := ARRAY(SELECT x FROM pg_snapshot_xip(o_lo) AS x
                                       WHERE x >= v_ptx AND pg_visible_in_snapshot(x, o_hi) ORDER BY x);
                        IF cardinality(v_run) = 0 THEN
                            v_ptx := pg_snapshot_xmax(o_lo); v_pid := 0;
                            CONTINUE;
                        END IF;
                        v_min_id := greatest(v_start, fanout._partition_floor(p_topic_id, v_run[1]));
                    ELSE
                        CONTINUE WHEN v_ptx >= pg_snapshot_xmax(o_hi);
                        v_run := NULL;
                        v_min_id := greatest(v_start, fanout._partition_floor(p_topic_id, v_ptx));
                    END IF;
                    <<scan>> LOOP
                    EXECUTE v_page INTO v_ids, v_txids, v_da, v_sz, v_used, v_match
                        USING p_kpart, v_lvl, v_run, pg_snapshot_xmax(o_hi), ARRAY(SELECT pg_snapshot_xip(o_hi)),
                              v_ptx, v_pid, v_min_id, v_left, v_mask, p_filter;
                    v_got := coalesce(cardinality(v_ids), 0);
                    v_more := false;
                    IF p_filter IS NOT NULL AND v_got > 0 THEN
                        -- The filter: keep the matches (the byte bound on them), pass the rest up to
                        -- where the kept part ends (v_cut: the scanned rows the cursor passes).
                        v_more := v_got = v_left;  -- a full scan: the phase may hold more
                        v_scanned := v_scanned + v_got;
                        v_keep := ARRAY(SELECT u.o FROM unnest(v_match) WITH ORDINALITY AS u(m, o) WHERE u.m ORDER BY u.o);
                        v_cut := v_got;
                        v_used := (SELECT sum(v_sz[k]) FROM unnest(v_keep) AS k);
                        IF v_used > v_bytes THEN
                            v_got := fanout._page_fit(ARRAY(SELECT v_sz[k] FROM unnest(v_keep) WITH ORDINALITY AS u(k, o) ORDER BY u.o),
                                                      v_bytes, cardinality(o_ids) = 0);
                            IF v_got < cardinality(v_keep) THEN
                                v_full := true; v_cut := v_keep[v_got + 1] - 1;
                                v_keep := v_keep[1:v_got];
                                v_used := (SELECT sum(v_sz[k]) FROM unnest(v_keep) AS k);
                            END IF;
                        END IF;
                        v_skip_ids := v_skip_ids || ARRAY(SELECT v_ids[o] FROM generate_series(1, v_cut) AS o
                                                          WHERE NOT v_match[o] ORDER BY o);
                        v_skip_txids := v_skip_txids || ARRAY(SELECT v_txids[o] FROM generate_series(1, v_cut) AS o
                                                              WHERE NOT v_match[o] ORDER BY o);
                        IF v_cut > 0 THEN  -- the cursor passes what was scanned up to the cut
                            v_ptx := v_txids[v_cut]; v_pid := v_ids[v_cut];
                        END IF;
                        v_got := cardinality(v_keep);
                        v_ids := ARRAY(SELECT v_ids[k] FROM unnest(v_keep) WITH ORDINALITY AS u(k, o) ORDER BY u.o);
                        v_txids := ARRAY(SELECT v_txids[k] FROM unnest(v_keep) WITH ORDINALITY AS u(k, o) ORDER BY u.o);
                        v_da := ARRAY(SELECT v_da[k] FROM unnest(v_keep) WITH ORDINALITY AS u(k, o) ORDER BY u.o);
                    ELSIF v_used > v_bytes THEN  -- the byte bound: the prefix that fits
                        v_got := fanout._page_fit(v_sz, v_bytes, cardinality(o_ids) = 0);
                        v_full := v_got < cardinality(v_ids);
                        v_ids := v_ids[1:v_got]; v_txids := v_txids[1:v_got]; v_da := v_da[1:v_got];
                        v_used := (SELECT sum(x) FROM unnest(v_sz[1:v_got]) AS x);
                    END IF;
                    v_bytes := v_bytes - coalesce(v_used, 0);
                    IF v_got > 0 THEN
                        o_ids := o_ids || v_ids; o_txids := o_txids || v_txids; v_deliver := v_deliver || v_da;
                        IF p_filter IS NULL THEN
                            v_ptx := v_txids[v_got]; v_pid := v_ids[v_got];
                        END IF;
                        v_left := v_left - v_got;
                    END IF;
                    v_full := v_full OR v_left = 0;
                    EXIT scan WHEN v_full OR NOT v_more;
                    -- The filter passed part of a full scan: scan on (bounded: then the page ends here).
                    IF v_scanned >= 10000 THEN
                        v_full := true;
                        EXIT scan;
                    END IF;
                    END LOOP;
                    EXIT windows WHEN v_full;
                    IF v_phase = 1 THEN
                        v_ptx := pg_snapshot_xmax(o_lo); v_pid := 0;
                    END IF;
                END LOOP;
                EXIT WHEN coalesce(v_lvl, 0) = 0;
                -- This level is used up: the next starts where the window's commit-order part ended.
                v_lvl := v_lvl - 1; v_ptx := o_cur_txid; v_pid := o_cur_id;
            END LOOP;
            -- The window is used up (by priority: its cursor moves to its end).
            IF v_prio THEN
                o_cur_txid := pg_snapshot_xmax(o_hi); o_cur_id := 0; v_lvl := 9;
                IF p_prio_ends THEN  -- priorities dropped: the next windows in commit order
                    v_prio := false; v_lvl := NULL;
                END IF;
            ELSE
                o_cur_txid := v_ptx; o_cur_id := v_pid;
            END IF;
            v_ptx := o_cur_txid; v_pid := o_cur_id;
            EXIT WHEN v_rounds >= 2;
            v_new := fanout._next_window(p_topic_id, p_bit, o_hi);
            EXIT WHEN v_new::text = o_hi::text;
            o_lo := o_hi; o_hi := v_new; o_cur_txid := '0'; o_cur_id := 0; v_ptx := '0'; v_pid := 0;
            v_rounds := v_rounds + 1;
            v_start := 0;
        END LOOP;

        -- whole_transactions: finish the producer transaction the page ended in.
        IF p_whole AND v_full AND cardinality(o_ids) > 0 THEN
            SELECT x.o_ids, x.o_txids, x.o_deliver INTO v_ids, v_txids, v_da
            FROM fanout._page_finish_tx(p_group_id, p_table, p_kpart, v_lvl, v_mask, cardinality(o_ids), v_ptx, v_pid) x;
            IF cardinality(v_ids) > 0 THEN
                v_ptx := v_txids[cardinality(v_ids)]; v_pid := v_ids[cardinality(v_ids)];
                IF p_filter IS NOT NULL THEN  -- the transaction's other messages are passed
                    v_match := fanout._filter_match(p_table, p_filter, v_ids, v_txids);
                    v_skip_ids := v_skip_ids || ARRAY(SELECT v_ids[o] FROM generate_series(1, cardinality(v_ids)) AS o
                                                      WHERE NOT v_match[o] ORDER BY o);
                    v_skip_txids := v_skip_txids || ARRAY(SELECT v_txids[o] FROM generate_series(1, cardinality(v_ids)) AS o
                                                          WHERE NOT v_match[o] ORDER BY o);
                    v_keep := ARRAY(SELECT u.o FROM unnest(v_match) WITH ORDINALITY AS u(m, o) WHERE u.m ORDER BY u.o);
                    v_ids := ARRAY(SELECT v_ids[k] FROM unnest(v_keep) WITH ORDINALITY AS u(k, o) ORDER BY u.o);
                    v_txids := ARRAY(SELECT v_txids[k] FROM unnest(v_keep) WITH ORDINALITY AS u(k, o) ORDER BY u.o);
                    v_da := ARRAY(SELECT v_da[k] FROM unnest(v_keep) WITH ORDINALITY AS u(k, o) ORDER BY u.o);
                END IF;
                o_ids := o_ids || v_ids; o_txids := o_txids || v_txids; v_deliver := v_deliver || v_da;
            END IF;
        END IF;

        -- Delayed messages not due yet wait in the retry table (fanout._page_defer).
        IF v_now < ANY (v_deliver) THEN  -- an expression, no query (NULL: none delayed)
            SELECT d.o_ids, d.o_txids INTO o_ids, o_txids
            FROM fanout._page_defer(p_group_id, p_kpart, o_ids, o_txids, v_deliver, v_now) d;
            -- A full page of delayed messages only: read on from the cursor.
            IF cardinality(o_ids) = 0 AND v_full AND v_pages < v_max_pages - 1 THEN
                v_pages := v_pages + 1; v_left := p_limit; v_bytes := coalesce(p_max_bytes, c_max);
                v_deliver := '{}'; v_full := false;
                CONTINUE pages;
            END IF;
        END IF;
        EXIT pages;
    END LOOP;

    IF NOT v_prio THEN
        o_cur_txid := v_ptx; o_cur_id := v_pid;
    ELSIF v_full THEN  -- the window is not used up: the level cursor
        o_plvl := v_lvl; o_ptx := v_ptx; o_pid := v_pid;
    END IF;
    -- The messages the filter passed over: done with, as if acked.
    o_filtered := cardinality(v_skip_ids);
    IF o_filtered > 0 AND p_bit IS NOT NULL THEN
        PERFORM fanout._complete_bits(p_group_id, v_skip_ids, v_skip_txids, false);
    END IF;
    o_changed := o_lo::text <> p_lo::text OR o_hi::text <> p_hi::text
                 OR (o_cur_txid, o_cur_id) IS DISTINCT FROM (p_cur_txid, p_cur_id)
                 OR (o_plvl, o_ptx, o_pid) IS DISTINCT FROM (p_plvl, p_ptx, p_pid);
END
$fn$;
