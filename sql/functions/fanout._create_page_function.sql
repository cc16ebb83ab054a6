-- fanout._create_page_function(p_name, p_params, p_argtypes, p_phase1,
-- p_phase2): (re)creates one page function fanout_data.<p_name>(<p_params>
-- p_running, p_to, p_skip, p_cur_txid, p_cur_id, p_min_id, p_limit, p_mask,
-- p_filter)
-- running p_phase1 when p_running is not NULL, else p_phase2 (each a SELECT
-- ... INTO its OUT arrays: the page's ids, txids, deliver_at, sizes and
-- whether each row's headers contain p_filter (a group's subscription
-- filter; NULL: every row does); the
-- rows themselves are fetched once the page is settled, by m<id>_rows), with
-- the settings every page scan needs, and
-- revokes it from PUBLIC. p_argtypes lists the argument types (for REVOKE).
-- Called by fanout._create_page_functions only. Creates a function.
CREATE OR REPLACE FUNCTION fanout._create_page_function(
    p_name text, p_params text, p_argtypes text, p_phase1 text, p_phase2 text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_ddl text;
BEGIN
    v_ddl := format($ddl$
        CREATE OR REPLACE FUNCTION fanout_data.%1$I(%2$s
            p_running xid8[], p_to xid8, p_skip xid8[], p_cur_txid xid8, p_cur_id bigint, p_min_id bigint,
            p_limit int, p_mask bigint, p_filter jsonb,
            OUT o_ids bigint[], OUT o_txids xid8[], OUT o_deliver timestamptz[],
            OUT o_sizes int[], OUT o_bytes bigint, OUT o_match boolean[])
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
                %3$s
            ELSE
                %4$s
            END IF;
        END
        $body$$ddl$, p_name, p_params, p_phase1, p_phase2);
    -- Replaced in place, so it keeps its oid: sessions running it, or about
    -- to (a read that resolved the name an instant before), go on with the
    -- new body (fanout._completion_switch regenerates it under traffic; a
    -- dropped function failed them with "cache lookup failed for function").
    -- Dropped first only when a new version returns other columns or
    -- renames a parameter, which CREATE OR REPLACE refuses.
    BEGIN
        EXECUTE v_ddl;
    EXCEPTION WHEN invalid_function_definition THEN
        EXECUTE format('DROP FUNCTION fanout_data.%I(%s)', p_name, p_argtypes);
        EXECUTE v_ddl;
    END;
    EXECUTE format('REVOKE ALL ON FUNCTION fanout_data.%I(%s) FROM PUBLIC', p_name, p_argtypes);
END
$fn$;
