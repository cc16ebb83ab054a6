-- fanout._create_page_functions(p_topic_id): (re)creates the topic's page
-- function in fanout_data, named from its message table:
-- m<id>_page(p_running, p_to, p_skip, p_cur_txid, p_cur_id, p_min_id,
-- p_limit, p_mask) returns one page of the group's stream as parallel arrays
-- in (txid, id) order (ids, txids, payloads, headers, message_groups,
-- published_at, deliver_at, each row's size) and the page's bytes
-- (fanout._window_page keeps the prefix that fits its byte budget). A row's
-- size is that of its payload, headers and message_group as stored
-- uncompressed (pg_column_size when not compressed, else the length of the
-- JSON text), so small rows cost no detoasting.
--   * p_running NOT NULL (phase 1): rows whose txid is in p_running, after
--     the cursor (p_cur_txid, p_cur_id);
--   * p_running NULL (phase 2): rows with txid in [p_cur_txid, p_to) after
--     the cursor, skipping txids in p_skip;
-- both from id p_min_id on (partition pruning, start cut-off), at most
-- p_limit rows, and on a reference topic only rows that require a bit of
-- p_mask. Its queries are static SQL planned once per session (a generic
-- plan: the id bound prunes partitions when the plan starts): planning the
-- page query on every page (dynamic SQL over the partitioned table) cost
-- more than running it. A further predicate (e.g. a key range) goes into
-- v_where below, once, for both phases.
-- Also m<id>_page_prio(the same arguments, p_level): the same page of one
-- priority level for fanout._window_page_priority, whose cursor is that
-- level's: level 0 (priority NULL) through the (txid, id) index, levels
-- 1..9 through the partial index (priority, txid, id).
-- Nobody but the owner may call them. Tables: fanout.topic; creates functions.
CREATE OR REPLACE FUNCTION fanout._create_page_functions(p_topic_id bigint)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_table text;
    v_ref   boolean;
    v_where text;
    v_sel   text;
    v_phase1 text := 'm.txid = ANY (p_running)';
    v_phase2 text := 'm.txid >= p_cur_txid AND m.txid < p_to AND m.txid <> ALL (p_skip)';
BEGIN
    SELECT t.data_table, t.completion = 'reference' INTO STRICT v_table, v_ref
    FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    v_where := 'AND (m.txid, m.id) > (p_cur_txid, p_cur_id) AND m.id >= p_min_id'
               || CASE WHEN v_ref THEN ' AND (m.required_groups & p_mask) <> 0' ELSE '' END;
    -- The aggregates read the ordered page as it comes (one pass, arrays in
    -- (txid, id) order, parallel).
    v_sel := 'SELECT array_agg(s.id), array_agg(s.txid), array_agg(s.payload), array_agg(s.headers),
                     array_agg(s.message_group), array_agg(s.published_at), array_agg(s.deliver_at),
                     array_agg(s.sz), sum(s.sz)
              INTO o_ids, o_txids, o_payloads, o_headers, o_groups, o_published, o_deliver, o_sizes, o_bytes
              FROM (SELECT m.txid, m.id, m.payload, m.headers, m.message_group, m.published_at, m.deliver_at,
                           CASE WHEN pg_column_compression(m.payload) IS NULL THEN pg_column_size(m.payload)
                                ELSE octet_length(m.payload::text) END
                           + CASE WHEN pg_column_compression(m.headers) IS NULL THEN pg_column_size(m.headers)
                                  ELSE octet_length(m.headers::text) END
                           + coalesce(octet_length(m.message_group), 0) AS sz
                    FROM fanout_data.' || quote_ident(v_table) || ' m
                    WHERE %s ' || v_where || ' %s
                    ORDER BY m.txid, m.id LIMIT p_limit) s;';
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(
            p_running xid8[], p_to xid8, p_skip xid8[], p_cur_txid xid8, p_cur_id bigint, p_min_id bigint,
            p_limit int, p_mask bigint,
            OUT o_ids bigint[], OUT o_txids xid8[], OUT o_payloads jsonb[], OUT o_headers jsonb[],
            OUT o_groups text[], OUT o_published timestamptz[], OUT o_deliver timestamptz[],
            OUT o_sizes int[], OUT o_bytes bigint)
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        -- Ordered index scans that stop after LIMIT rows, whatever the (often
        -- missing) statistics of young partitions make the planner guess.
        SET enable_bitmapscan = off
        SET enable_seqscan = off
        SET enable_sort = off
        SET jit = off
        SET plan_cache_mode = force_generic_plan
        AS $body$
        BEGIN
            IF p_running IS NOT NULL THEN
                %2$s
            ELSE
                %3$s
            END IF;
        END
        $body$$ddl$, v_table || '_page',
        format(v_sel, v_phase1, ''),
        format(v_sel, v_phase2, ''));
    EXECUTE format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(
            p_running xid8[], p_to xid8, p_skip xid8[], p_cur_txid xid8, p_cur_id bigint, p_min_id bigint,
            p_limit int, p_mask bigint, p_level int,
            OUT o_ids bigint[], OUT o_txids xid8[], OUT o_payloads jsonb[], OUT o_headers jsonb[],
            OUT o_groups text[], OUT o_published timestamptz[], OUT o_deliver timestamptz[],
            OUT o_sizes int[], OUT o_bytes bigint)
        LANGUAGE plpgsql
        SET search_path = pg_catalog, fanout, pg_temp
        SET enable_bitmapscan = off
        SET enable_seqscan = off
        SET enable_sort = off
        SET jit = off
        SET plan_cache_mode = force_generic_plan
        AS $body$
        BEGIN
            IF p_level = 0 AND p_running IS NOT NULL THEN
                %2$s
            ELSIF p_level = 0 THEN
                %3$s
            ELSIF p_running IS NOT NULL THEN
                %4$s
            ELSE
                %5$s
            END IF;
        END
        $body$$ddl$, v_table || '_page_prio',
        format(v_sel, v_phase1, 'AND m.priority IS NULL'),
        format(v_sel, v_phase2, 'AND m.priority IS NULL'),
        format(v_sel, v_phase1, 'AND m.priority = p_level'),
        format(v_sel, v_phase2, 'AND m.priority = p_level'));
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(xid8[], xid8, xid8[], xid8, bigint, bigint, int, bigint) FROM PUBLIC',
                   v_table || '_page');
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(xid8[], xid8, xid8[], xid8, bigint, bigint, int, bigint, int) FROM PUBLIC',
                   v_table || '_page_prio');
END
$fn$;
