-- fanout._window_page(p_group_id, p_topic_id, p_table, p_limit, p_max_bytes):
-- the next page of at most p_limit messages of a group's stream, in
-- commit-safe order, and of at most p_max_bytes bytes (NULL: no limit; sizes
-- as fanout._create_page_functions measures them) except that the first
-- message of a page always comes.
--
-- The group's position is a snapshot window (lo, hi) and a cursor
-- (cur_txid, cur_id). The window holds the messages whose txid is visible in
-- hi but not in lo: first the txids that were still running at lo (phase 1,
-- point look-ups), then the txid range [xmax(lo), xmax(hi)) (phase 2, one
-- index range scan), both in (txid, id) order from the cursor. When the window
-- is used up, the next one is opened with a fresh snapshot (lo := hi,
-- hi := now): no ticker, and a transaction that stays open only delays its own
-- messages. Every page is an index scan that stops after p_limit rows.
-- Messages below the group's effective_start_id (its start position) are
-- skipped in its first window only (lo is the origin '1:1:' and hi the
-- snapshot of the subscription): that window is the history the start
-- position asks for, capped. Later windows hold what committed after the
-- subscription, whatever its id: a transaction that took a low id before the
-- subscription and committed after it is delivered. Closed partitions that
-- cannot hold the scanned txids are skipped, and in reference mode messages
-- that do not require the group; where a group joined or left while they
-- were written, their transactions wait (counted as running in the new
-- window's snapshot) until their stamps are reconciled
-- (fanout._reconcile_stamps, tried here first).
-- New windows end at fanout._snapshot(), which counts the caller's own
-- transaction as running: a reader never gets its own uncommitted messages,
-- and gets them after it commits.
--
-- Messages published with a deliver_at still in the future are not handed
-- out: the cursor passes them and they go to the group's retry table
-- (attempt 0, not_before = deliver_at), which fanout.read serves when due.
-- A full page of nothing but such messages is followed by the next one (up
-- to 10 pages a call), so a run of delayed messages does not make a read
-- come back empty while undelayed ones follow it.
-- The scans are the topic's generated page function (m<id>_page, see
-- fanout._create_page_functions), planned once per session. The page comes back with its messages (payload, headers, message_group,
-- published_at as arrays parallel to o_ids), so the caller needs no second
-- look-up. The caller holds the group row FOR NO KEY UPDATE and writes the
-- returned state back (o_changed). Reads fanout.consumer_group, fanout.partition and the
-- topic's message table; writes fanout.retry (delayed messages) and, through
-- fanout._reconcile_stamps, reference-mode stamps.
CREATE OR REPLACE FUNCTION fanout._window_page(
    p_group_id bigint, p_topic_id bigint, p_table text, p_limit int, p_max_bytes bigint,
    OUT o_ids bigint[], OUT o_txids xid8[],
    OUT o_payloads jsonb[], OUT o_headers jsonb[], OUT o_groups text[], OUT o_published timestamptz[],
    OUT o_lo pg_snapshot, OUT o_hi pg_snapshot, OUT o_cur_txid xid8, OUT o_cur_id bigint,
    OUT o_changed boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_left    int := p_limit;
    v_rounds  int := 0;
    v_lo_xmax xid8;
    v_lo_xip  xid8[];
    v_hi_xip  xid8[];
    v_ids     bigint[];
    v_txids   xid8[];
    v_pl      jsonb[];
    v_hd      jsonb[];
    v_gr      text[];
    v_pa      timestamptz[];
    v_da      timestamptz[];
    v_deliver timestamptz[] := '{}';
    v_now     timestamptz := clock_timestamp();
    v_got     int;
    v_min_id  bigint;
    v_new     pg_snapshot;
    v_start   bigint;
    v_bit     int;
    v_mask    bigint := 0;
    v_page    text := format('SELECT * FROM fanout_data.%I($1, $2, $3, $4, $5, $6, $7, $8)', p_table || '_page');
    v_bytes   bigint := coalesce(p_max_bytes, 9223372036854775807);  -- budget left
    v_used    bigint;
    v_sz      int[];
    v_cut     boolean;
    v_pages   int := 0;
BEGIN
    SELECT g.win_lo, g.win_hi, g.cur_txid, g.cur_id, coalesce(g.effective_start_id, 0), g.bit_no
    INTO o_lo, o_hi, o_cur_txid, o_cur_id, v_start, v_bit
    FROM fanout.consumer_group g WHERE g.group_id = p_group_id;
    IF v_bit IS NOT NULL THEN
        -- Reference mode: only messages that require this group.
        v_mask := 1::bigint << v_bit;
        PERFORM fanout._reconcile_stamps(p_topic_id, o_hi);
    END IF;
    IF pg_snapshot_xmax(o_lo) <> '1' THEN
        v_start := 0;  -- past the first window: no start cut-off
    END IF;
    o_ids := '{}';
    o_txids := '{}';
    o_payloads := '{}';
    o_headers := '{}';
    o_groups := '{}';
    o_published := '{}';
    o_changed := false;
    <<pages>>
    LOOP
        LOOP
            v_lo_xmax := pg_snapshot_xmax(o_lo);
            -- Phase 1: transactions running at lo that committed by hi.
            IF o_cur_txid < v_lo_xmax THEN
                v_lo_xip := ARRAY(SELECT x FROM pg_snapshot_xip(o_lo) AS x
                                  WHERE x >= o_cur_txid AND pg_visible_in_snapshot(x, o_hi) ORDER BY x);
                IF cardinality(v_lo_xip) > 0 THEN
                    v_min_id := greatest(v_start, fanout._partition_floor(p_topic_id, v_lo_xip[1]));
                    EXECUTE v_page INTO v_ids, v_txids, v_pl, v_hd, v_gr, v_pa, v_da, v_sz, v_used
                        USING v_lo_xip, NULL::xid8, NULL::xid8[], o_cur_txid, o_cur_id, v_min_id, v_left, v_mask;
                    v_got := coalesce(cardinality(v_ids), 0);
                    v_cut := false;
                    IF v_used > v_bytes THEN
                        v_got := fanout._page_fit(v_sz, v_bytes, cardinality(o_ids) = 0);
                        v_cut := v_got < cardinality(v_ids);
                        v_ids := v_ids[1:v_got]; v_txids := v_txids[1:v_got]; v_pl := v_pl[1:v_got];
                        v_hd := v_hd[1:v_got]; v_gr := v_gr[1:v_got]; v_pa := v_pa[1:v_got]; v_da := v_da[1:v_got];
                        v_used := (SELECT sum(x) FROM unnest(v_sz[1:v_got]) AS x);
                    END IF;
                    v_bytes := v_bytes - coalesce(v_used, 0);
                    IF v_got > 0 THEN
                        o_ids := o_ids || v_ids;
                        o_txids := o_txids || v_txids;
                        o_payloads := o_payloads || v_pl;
                        o_headers := o_headers || v_hd;
                        o_groups := o_groups || v_gr;
                        o_published := o_published || v_pa;
                        v_deliver := v_deliver || v_da;
                        o_cur_txid := v_txids[v_got];
                        o_cur_id := v_ids[v_got];
                        o_changed := true;
                        v_left := v_left - v_got;
                    END IF;
                    EXIT WHEN v_left = 0 OR v_cut;
                END IF;
                o_cur_txid := v_lo_xmax;
                o_cur_id := 0;
                o_changed := true;
            END IF;

            -- Phase 2: the txid range [xmax(lo), xmax(hi)), skipping what hi saw running.
            v_hi_xip := ARRAY(SELECT pg_snapshot_xip(o_hi));
            IF o_cur_txid < pg_snapshot_xmax(o_hi) THEN
                v_min_id := greatest(v_start, fanout._partition_floor(p_topic_id, o_cur_txid));
                EXECUTE v_page INTO v_ids, v_txids, v_pl, v_hd, v_gr, v_pa, v_da, v_sz, v_used
                    USING NULL::xid8[], pg_snapshot_xmax(o_hi), v_hi_xip, o_cur_txid, o_cur_id, v_min_id, v_left, v_mask;
                v_got := coalesce(cardinality(v_ids), 0);
                v_cut := false;
                IF v_used > v_bytes THEN
                    v_got := fanout._page_fit(v_sz, v_bytes, cardinality(o_ids) = 0);
                    v_cut := v_got < cardinality(v_ids);
                    v_ids := v_ids[1:v_got]; v_txids := v_txids[1:v_got]; v_pl := v_pl[1:v_got];
                    v_hd := v_hd[1:v_got]; v_gr := v_gr[1:v_got]; v_pa := v_pa[1:v_got]; v_da := v_da[1:v_got];
                    v_used := (SELECT sum(x) FROM unnest(v_sz[1:v_got]) AS x);
                END IF;
                v_bytes := v_bytes - coalesce(v_used, 0);
                IF v_got > 0 THEN
                    o_ids := o_ids || v_ids;
                    o_txids := o_txids || v_txids;
                    o_payloads := o_payloads || v_pl;
                    o_headers := o_headers || v_hd;
                    o_groups := o_groups || v_gr;
                    o_published := o_published || v_pa;
                    v_deliver := v_deliver || v_da;
                    o_cur_txid := v_txids[v_got];
                    o_cur_id := v_ids[v_got];
                    o_changed := true;
                    v_left := v_left - v_got;
                END IF;
                EXIT WHEN v_left = 0 OR v_cut;
            END IF;

            -- The window is used up: open the next one, a bounded number of times.
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
        END LOOP;

        -- Delayed messages (publish(..., deliver_at)) not due yet: the cursor
        -- passes them, and they wait in the group's retry table until then, so
        -- they never hold back what comes after them.
        IF EXISTS (SELECT 1 FROM unnest(v_deliver) AS d WHERE d > v_now) THEN
            INSERT INTO fanout.retry (group_id, message_id, txid, attempt, not_before)
            SELECT p_group_id, u.id, u.tx, 0, u.d
            FROM unnest(o_ids, o_txids, v_deliver) AS u(id, tx, d)
            WHERE u.d > v_now
            ON CONFLICT DO NOTHING;
            SELECT coalesce(array_agg(u.id ORDER BY u.ord), '{}'), coalesce(array_agg(u.tx ORDER BY u.ord), '{}'),
                   coalesce(array_agg(u.p ORDER BY u.ord), '{}'), coalesce(array_agg(u.h ORDER BY u.ord), '{}'),
                   coalesce(array_agg(u.g ORDER BY u.ord), '{}'), coalesce(array_agg(u.pa ORDER BY u.ord), '{}')
            INTO o_ids, o_txids, o_payloads, o_headers, o_groups, o_published
            FROM unnest(o_ids, o_txids, o_payloads, o_headers, o_groups, o_published, v_deliver)
                 WITH ORDINALITY AS u(id, tx, p, h, g, pa, d, ord)
            WHERE u.d IS NULL OR u.d <= v_now;
            -- A full page of delayed messages only: read on from the cursor.
            IF cardinality(o_ids) = 0 AND (v_left = 0 OR v_cut) AND v_pages < 9 THEN
                v_pages := v_pages + 1;
                v_left := p_limit;
                v_bytes := coalesce(p_max_bytes, 9223372036854775807);
                v_deliver := '{}';
                CONTINUE pages;
            END IF;
        END IF;
        EXIT pages;
    END LOOP;
END
$fn$;
