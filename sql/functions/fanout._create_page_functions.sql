-- fanout._create_page_functions(p_topic_id): (re)creates the topic's page
-- functions in fanout_data, named from its message table:
-- m<id>_page(p_kpart, p_level, p_running, p_to, p_skip, p_cur_txid, p_cur_id,
-- p_min_id, p_limit, p_mask, p_filter) returns one page of a stream
-- position as parallel arrays in (txid, id) order (ids, txids, deliver_at,
-- each row's size, whether its headers contain p_filter: the group's
-- subscription filter, judged in the same scan) and the page's bytes (fanout._window_walk keeps the prefix that fits
-- its byte budget). Not the rows themselves: a page is settled first (byte
-- budget, delayed messages, sequence gate, lease) and its rows are then
-- returned by m<id>_rows(p_lease, p_ids, p_txids, p_atts), one index look-up
-- each, in the order of the arrays (lease_id, message_id, payload, headers,
-- message_group, published_at, attempt: the rows of fanout.read); carrying
-- payloads through the arrays cost more than looking them up again.
-- A row's size is that of its payload, headers and message_group as stored
-- uncompressed (pg_column_size when not compressed, else the length of the
-- JSON text), so small rows cost no detoasting.
--   * p_running NOT NULL (phase 1): rows whose txid is in p_running, after
--     the cursor (p_cur_txid, p_cur_id);
--   * p_running NULL (phase 2): rows with txid in [p_cur_txid, p_to) after
--     the cursor, skipping txids in p_skip;
-- both from id p_min_id on (partition pruning, start cut-off), at most
-- p_limit rows, and on a reference topic only rows that require a bit of
-- p_mask (on a topic switched to reference, only from its switch id on:
-- fanout._completion_switch_reference). p_kpart NOT NULL (partitioned topics): only key partition
-- p_kpart, on the (kpart, txid, id) index (phase 1 as one ordered range per
-- running txid). p_level NOT NULL: only that priority level (0: priority
-- NULL), levels 1..9 of the whole stream through the partial index
-- (priority, txid, id). Each combination is its own static query, planned
-- once per session (a generic plan: the id bound prunes partitions when the
-- plan starts); planning the page query on every page (dynamic SQL over the
-- partitioned table) cost more than running it. A further predicate goes
-- into v_where below, once, for every scan.
-- Nobody but the owner may call them. Tables: fanout.topic; creates functions.
CREATE OR REPLACE FUNCTION fanout._create_page_functions(p_topic_id bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_table text;
    v_ref   boolean;
    v_switch bigint;
    v_parts int;
    v_where text;
    v_sel   text;
    v_from  text;
    v_args  text := 'xid8[], xid8, xid8[], xid8, bigint, bigint, int, bigint, jsonb';
    v_levels text := 'IF p_level IS NULL THEN %s ELSIF p_level = 0 THEN %s ELSE %s END IF;';
    v_klat  text := 'unnest(p_running) AS x(tx) CROSS JOIN LATERAL (
                         SELECT m.* FROM %s m WHERE m.kpart = p_kpart AND m.txid = x.tx %s
                         ORDER BY m.kpart, m.txid, m.id LIMIT p_limit) m';
    v_run   text;
    v_body  text;
    v_kbody text;
    v_phase text[] := '{}';
BEGIN
    SELECT t.data_table, t.completion = 'reference', t.partitions,
           CASE WHEN t.completion = 'reference' THEN t.completion_switch_id END
    INTO STRICT v_table, v_ref, v_parts, v_switch
    FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    v_from := 'fanout_data.' || quote_ident(v_table);
    -- A topic switched from offset completion: rows below the switch id
    -- carry no bits and are read by position alone (every row, as before).
    v_where := 'AND (m.txid, m.id) > (p_cur_txid, p_cur_id) AND m.id >= p_min_id'
               || CASE WHEN v_ref AND v_switch IS NOT NULL
                       THEN format(' AND (m.id < %s::bigint OR (m.required_groups & p_mask) <> 0)', v_switch)
                       WHEN v_ref THEN ' AND (m.required_groups & p_mask) <> 0' ELSE '' END;
    -- %1$s: the rows (a FROM item named m), %2$s: their predicate, %3$s:
    -- the index order. The aggregates read the ordered page as it comes
    -- (one pass, arrays in (txid, id) order, parallel).
    v_sel := 'SELECT array_agg(s.id), array_agg(s.txid), array_agg(s.deliver_at), array_agg(s.sz), sum(s.sz),
                     array_agg(s.ok)
              INTO o_ids, o_txids, o_deliver, o_sizes, o_bytes, o_match
              FROM (SELECT m.txid, m.id, m.deliver_at, (p_filter IS NULL OR m.headers @> p_filter) AS ok,
                           CASE WHEN pg_column_compression(m.payload) IS NULL THEN pg_column_size(m.payload)
                                ELSE octet_length(m.payload::text) END
                           + CASE WHEN pg_column_compression(m.headers) IS NULL THEN pg_column_size(m.headers)
                                  ELSE octet_length(m.headers::text) END
                           + coalesce(octet_length(m.message_group), 0) AS sz
                    FROM %1$s
                    WHERE %2$s ' || v_where || '
                    ORDER BY %3$s LIMIT p_limit) s;';
    -- One page function for every ordering: p_kpart NULL (the whole stream)
    -- or a key partition, p_level NULL (commit order) or a priority level
    -- (0: priority NULL). Each branch is its own static query.
    FOREACH v_run IN ARRAY ARRAY['m.txid = ANY (p_running)',
                                 'm.txid >= p_cur_txid AND m.txid < p_to AND m.txid <> ALL (p_skip)'] LOOP
        v_body := format(v_levels, format(v_sel, v_from || ' m', v_run, 'm.txid, m.id'),
                         format(v_sel, v_from || ' m', v_run || ' AND m.priority IS NULL', 'm.txid, m.id'),
                         format(v_sel, v_from || ' m', v_run || ' AND m.priority = p_level', 'm.txid, m.id'));
        IF v_parts IS NULL THEN
            v_kbody := 'RAISE EXCEPTION ''topic has no key partitions'' USING ERRCODE = ''PGQ03'';';
        ELSIF v_run LIKE 'm.txid = ANY%' THEN
            -- Phase 1 as one ordered range of the partition per running txid.
            v_kbody := format(v_levels,
                format(v_sel, format(v_klat, v_from, v_where), 'true', 'm.txid, m.id'),
                format(v_sel, format(v_klat, v_from, v_where || ' AND m.priority IS NULL'), 'true', 'm.txid, m.id'),
                format(v_sel, format(v_klat, v_from, v_where || ' AND m.priority = p_level'), 'true', 'm.txid, m.id'));
        ELSE
            v_kbody := format(v_levels,
                format(v_sel, v_from || ' m', 'm.kpart = p_kpart AND ' || v_run, 'm.kpart, m.txid, m.id'),
                format(v_sel, v_from || ' m', 'm.kpart = p_kpart AND ' || v_run || ' AND m.priority IS NULL',
                       'm.kpart, m.txid, m.id'),
                format(v_sel, v_from || ' m', 'm.kpart = p_kpart AND ' || v_run || ' AND m.priority = p_level',
                       'm.kpart, m.txid, m.id'));
        END IF;
        v_phase := v_phase || format('IF p_kpart IS NULL THEN %s ELSE %s END IF;', v_body, v_kbody);
    END LOOP;
    -- The version before subscription filters (no p_filter): gone.
    EXECUTE format('DROP FUNCTION IF EXISTS fanout_data.%I(int, int, xid8[], xid8, xid8[], xid8, bigint, bigint, int, bigint)',
                   v_table || '_page');
    PERFORM fanout._create_page_function(v_table || '_page', 'p_kpart int, p_level int, ', 'int, int, ' || v_args,
                                         v_phase[1], v_phase[2]);
    -- The rows of a settled page, in the order of its arrays.
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(p_lease bigint, p_ids bigint[], p_txids xid8[], p_atts int[])
        RETURNS TABLE(lease_id bigint, message_id bigint, payload jsonb, headers jsonb, message_group text,
                      published_at timestamptz, attempt int)
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        SET enable_seqscan = off
        SET enable_bitmapscan = off
        SET jit = off
        SET plan_cache_mode = force_generic_plan
        AS $body$
        BEGIN
            RETURN QUERY
            SELECT p_lease, m.id, m.payload, m.headers, m.message_group, m.published_at, u.att
            FROM unnest(p_ids, p_txids, p_atts) WITH ORDINALITY AS u(id, tx, att, ord)
            CROSS JOIN LATERAL (SELECT x.id, x.payload, x.headers, x.message_group, x.published_at
                                FROM %2$s x WHERE x.txid = u.tx AND x.id = u.id) m
            ORDER BY u.ord;
        END
        $body$$ddl$, v_table || '_rows', v_from);
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(bigint, bigint[], xid8[], int[]) FROM PUBLIC',
                   v_table || '_rows');
END
$fn$;
