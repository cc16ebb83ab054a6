-- fanout._kpart_page(p_group_id, p_t, p_kpart, p_limit, p_max_bytes, p_lo, p_hi,
-- p_cur_txid, p_cur_id, p_start, p_bit): the next page of one key partition
-- of a group's stream: fanout._window_page's algorithm (snapshot window
-- (lo, hi) plus cursor, phase 1 = txids running at lo that committed by hi,
-- phase 2 = the txid range [xmax(lo), xmax(hi)) without those running at hi,
-- at most two lazy ticks, windows ending at fanout._snapshot(), the start
-- cut-off p_start in the first window only, the byte budget
-- (fanout._page_fit), reference-mode filtering and stamp reconciliation,
-- delayed messages moved to the retry table) restricted to the rows with
-- kpart = p_kpart, scanned on the (kpart, txid, id) index. The state is
-- passed in (fanout.kpart's row) and returned; the caller holds that row
-- locked and writes it back when o_changed.
-- whole_transactions (p_t.whole_transactions): a page that ends (by
-- p_limit or by bytes) inside one producer transaction's messages of this
-- key partition is extended to the end of that transaction, up to 10,000
-- messages in all; a longer transaction is split there and an event_log row
-- (kind 'transaction_split') says so.
-- Reads fanout.partition and the topic's message table; writes fanout.retry
-- (delayed messages, with their kpart), fanout.event_log, and through
-- fanout._reconcile_stamps reference-mode stamps.
CREATE OR REPLACE FUNCTION fanout._kpart_page(
    p_group_id bigint, p_t fanout.topic, p_kpart int, p_limit int, p_max_bytes bigint,
    p_lo pg_snapshot, p_hi pg_snapshot, p_cur_txid xid8, p_cur_id bigint, p_start bigint, p_bit int,
    OUT o_ids bigint[], OUT o_txids xid8[],
    OUT o_payloads jsonb[], OUT o_headers jsonb[], OUT o_groups text[], OUT o_published timestamptz[],
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
    c_cap     constant int := 10000;   -- whole_transactions: hard cap of a page
    v_table   text := p_t.data_table;
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
    v_start   bigint := coalesce(p_start, 0);
    v_filter  text;
    v_bytes   bigint := coalesce(p_max_bytes, 9223372036854775807);
    v_used    bigint;
    v_sz      int[];
    v_cut     boolean := false;
    -- A page scan (rows in (txid, id) order, LIMIT included) aggregated into
    -- parallel arrays plus each row's size and the total, sizes measured as
    -- fanout._create_page_functions does (fanout._page_fit keeps the prefix
    -- that fits the byte budget).
    v_agg     text := 'SELECT array_agg(s.id ORDER BY s.txid, s.id), array_agg(s.txid ORDER BY s.txid, s.id),
                              array_agg(s.payload ORDER BY s.txid, s.id), array_agg(s.headers ORDER BY s.txid, s.id),
                              array_agg(s.message_group ORDER BY s.txid, s.id),
                              array_agg(s.published_at ORDER BY s.txid, s.id),
                              array_agg(s.deliver_at ORDER BY s.txid, s.id), array_agg(s.sz ORDER BY s.txid, s.id),
                              sum(s.sz)
                       FROM (SELECT m.*,
                                    CASE WHEN pg_column_compression(m.payload) IS NULL THEN pg_column_size(m.payload)
                                         ELSE octet_length(m.payload::text) END
                                    + CASE WHEN pg_column_compression(m.headers) IS NULL THEN pg_column_size(m.headers)
                                           ELSE octet_length(m.headers::text) END
                                    + coalesce(octet_length(m.message_group), 0) AS sz
                             FROM (%s) m) s';
    v_more    int;
BEGIN
    o_lo := p_lo;
    o_hi := p_hi;
    o_cur_txid := p_cur_txid;
    o_cur_id := p_cur_id;
    v_filter := format(' AND m.kpart = %s', p_kpart);
    IF p_bit IS NOT NULL THEN
        v_filter := v_filter || format(' AND (m.required_groups & %L::bigint) <> 0', 1::bigint << p_bit);
        PERFORM fanout._reconcile_stamps(p_t.topic_id, o_hi);
    END IF;
    IF pg_snapshot_xmax(o_lo) <> '1' THEN
        v_start := 0;
    END IF;
    o_ids := '{}';
    o_txids := '{}';
    o_payloads := '{}';
    o_headers := '{}';
    o_groups := '{}';
    o_published := '{}';
    o_changed := false;
    LOOP
        v_lo_xmax := pg_snapshot_xmax(o_lo);
        -- Phase 1: transactions running at lo that committed by hi, one
        -- ordered index range per txid (kpart, txid, id).
        IF o_cur_txid < v_lo_xmax THEN
            v_lo_xip := ARRAY(SELECT x FROM pg_snapshot_xip(o_lo) AS x
                              WHERE x >= o_cur_txid AND pg_visible_in_snapshot(x, o_hi) ORDER BY x);
            IF cardinality(v_lo_xip) > 0 THEN
                v_min_id := greatest(v_start, fanout._partition_floor(p_t.topic_id, v_lo_xip[1]));
                EXECUTE format(v_agg, format(
                    'SELECT m.* FROM unnest($1::xid8[]) AS x(tx)
                     CROSS JOIN LATERAL (
                         SELECT m.* FROM fanout_data.%I m
                         WHERE m.txid = x.tx AND (m.txid, m.id) > ($2, $3) AND m.id >= $4 %s
                         ORDER BY m.kpart, m.txid, m.id LIMIT $5) m
                     ORDER BY m.txid, m.id LIMIT $5', v_table, v_filter))
                    INTO v_ids, v_txids, v_pl, v_hd, v_gr, v_pa, v_da, v_sz, v_used
                    USING v_lo_xip, o_cur_txid, o_cur_id, v_min_id, v_left;
                v_cut := false;
                IF v_used > v_bytes THEN
                    v_got := fanout._page_fit(v_sz, v_bytes, cardinality(o_ids) = 0);
                    v_cut := v_got < cardinality(v_ids);
                    v_ids := v_ids[1:v_got]; v_txids := v_txids[1:v_got]; v_pl := v_pl[1:v_got];
                    v_hd := v_hd[1:v_got]; v_gr := v_gr[1:v_got]; v_pa := v_pa[1:v_got]; v_da := v_da[1:v_got];
                    v_used := (SELECT sum(x) FROM unnest(v_sz[1:v_got]) AS x);
                END IF;
                v_bytes := v_bytes - coalesce(v_used, 0);
                v_got := coalesce(cardinality(v_ids), 0);
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
            v_min_id := greatest(v_start, fanout._partition_floor(p_t.topic_id, o_cur_txid));
            EXECUTE format(v_agg, format(
                'SELECT m.* FROM fanout_data.%I m
                 WHERE m.txid >= $1 AND m.txid < $2 AND (m.txid, m.id) > ($1, $3)
                   AND m.txid <> ALL ($4) AND m.id >= $5 %s
                 ORDER BY m.kpart, m.txid, m.id LIMIT $6', v_table, v_filter))
                INTO v_ids, v_txids, v_pl, v_hd, v_gr, v_pa, v_da, v_sz, v_used
                USING o_cur_txid, pg_snapshot_xmax(o_hi), o_cur_id, v_hi_xip, v_min_id, v_left;
            v_cut := false;
            IF v_used > v_bytes THEN
                v_got := fanout._page_fit(v_sz, v_bytes, cardinality(o_ids) = 0);
                v_cut := v_got < cardinality(v_ids);
                v_ids := v_ids[1:v_got]; v_txids := v_txids[1:v_got]; v_pl := v_pl[1:v_got];
                v_hd := v_hd[1:v_got]; v_gr := v_gr[1:v_got]; v_pa := v_pa[1:v_got]; v_da := v_da[1:v_got];
                v_used := (SELECT sum(x) FROM unnest(v_sz[1:v_got]) AS x);
            END IF;
            v_bytes := v_bytes - coalesce(v_used, 0);
            v_got := coalesce(cardinality(v_ids), 0);
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

        EXIT WHEN v_rounds >= 2;
        v_new := fanout._next_window(p_t.topic_id, p_bit, o_hi);
        EXIT WHEN v_new::text = o_hi::text;
        o_lo := o_hi;
        o_hi := v_new;
        o_cur_txid := '0';
        o_cur_id := 0;
        o_changed := true;
        v_rounds := v_rounds + 1;
        v_start := 0;
    END LOOP;

    -- whole_transactions: finish the producer transaction the page ended in
    -- (its txid is committed and in the window: all its rows are there).
    IF p_t.whole_transactions AND (v_left = 0 OR v_cut) AND cardinality(o_ids) > 0 THEN
        EXECUTE format(
            'SELECT array_agg(m.txid ORDER BY m.id), array_agg(m.id ORDER BY m.id),
                    array_agg(m.payload ORDER BY m.id), array_agg(m.headers ORDER BY m.id),
                    array_agg(m.message_group ORDER BY m.id), array_agg(m.published_at ORDER BY m.id),
                    array_agg(m.deliver_at ORDER BY m.id)
             FROM (SELECT m.* FROM fanout_data.%I m
                   WHERE m.kpart = $1 AND m.txid = $2 AND m.id > $3 %s
                   ORDER BY m.kpart, m.txid, m.id LIMIT $4) m', v_table,
            CASE WHEN p_bit IS NOT NULL
                 THEN format(' AND (m.required_groups & %L::bigint) <> 0', 1::bigint << p_bit) ELSE '' END)
            INTO v_txids, v_ids, v_pl, v_hd, v_gr, v_pa, v_da
            USING p_kpart, o_cur_txid, o_cur_id, greatest(c_cap - cardinality(o_ids), 0) + 1;
        v_got := coalesce(cardinality(v_ids), 0);
        IF v_got > 0 THEN
            v_more := least(v_got, greatest(c_cap - cardinality(o_ids), 0));
            IF v_more > 0 THEN
                o_ids := o_ids || v_ids[1:v_more];
                o_txids := o_txids || v_txids[1:v_more];
                o_payloads := o_payloads || v_pl[1:v_more];
                o_headers := o_headers || v_hd[1:v_more];
                o_groups := o_groups || v_gr[1:v_more];
                o_published := o_published || v_pa[1:v_more];
                v_deliver := v_deliver || v_da[1:v_more];
                o_cur_txid := v_txids[v_more];
                o_cur_id := v_ids[v_more];
                o_changed := true;
            END IF;
            IF v_got > v_more THEN
                INSERT INTO fanout.event_log (topic, group_name, kind, count, detail)
                SELECT p_t.topic, g.group_name, 'transaction_split', cardinality(o_ids),
                       jsonb_build_object('partition', p_kpart, 'txid', o_cur_txid::text, 'cap', c_cap,
                                          'last_id', o_cur_id)
                FROM fanout.consumer_group g WHERE g.group_id = p_group_id;
            END IF;
        END IF;
    END IF;

    IF EXISTS (SELECT 1 FROM unnest(v_deliver) AS d WHERE d > v_now) THEN
        INSERT INTO fanout.retry (group_id, message_id, txid, attempt, not_before, kpart)
        SELECT p_group_id, u.id, u.tx, 0, u.d, p_kpart
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
    END IF;
END
$fn$;
