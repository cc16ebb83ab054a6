-- fanout._filter_match(p_table, p_filter, p_ids, p_txids): for a page of a
-- group's stream (parallel arrays of ids and txids, fanout._window_walk),
-- whether each message's headers contain p_filter (the group's
-- subscription filter), in the order of the arrays: one index look-up per
-- message, paid only by groups that have a filter.
-- Reads the topic's message table (p_table is its data_table).
CREATE OR REPLACE FUNCTION fanout._filter_match(p_table text, p_filter jsonb, p_ids bigint[], p_txids xid8[])
RETURNS boolean[]
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_match boolean[];
BEGIN
    EXECUTE format(
        'SELECT array_agg(coalesce(m.headers @> $3, false) ORDER BY u.ord)
         FROM unnest($1::bigint[], $2::xid8[]) WITH ORDINALITY AS u(id, tx, ord)
         LEFT JOIN LATERAL (SELECT x.headers FROM fanout_data.%I x
                            WHERE x.txid = u.tx AND x.id = u.id OFFSET 0) m ON true', p_table)
        INTO v_match USING p_ids, p_txids, p_filter;
    RETURN v_match;
END
$fn$;
