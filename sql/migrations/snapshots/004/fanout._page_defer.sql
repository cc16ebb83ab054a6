-- fanout._page_defer(p_group_id, p_kpart, p_ids, p_txids, p_deliver, p_now):
-- takes the delayed messages (publish(..., deliver_at)) that are not due at
-- p_now out of a stream page (parallel arrays ids, txids, deliver_at): the
-- cursor has passed them, so they wait in the group's retry table (attempt
-- 0, not_before = deliver_at, with the key partition p_kpart) until then,
-- and never hold back what comes after them. Called by fanout._window_walk.
-- Returns the rest of the page in its order. Tables: fanout.retry.
CREATE OR REPLACE FUNCTION fanout._page_defer(
    p_group_id bigint, p_kpart int, p_ids bigint[], p_txids xid8[], p_deliver timestamptz[], p_now timestamptz,
    OUT o_ids bigint[], OUT o_txids xid8[])
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    INSERT INTO fanout.retry (group_id, message_id, txid, attempt, not_before, kpart)
    SELECT p_group_id, u.id, u.tx, 0, u.d, p_kpart
    FROM unnest(p_ids, p_txids, p_deliver) AS u(id, tx, d) WHERE u.d > p_now
    ON CONFLICT DO NOTHING;
    SELECT coalesce(array_agg(u.id ORDER BY u.ord), '{}'), coalesce(array_agg(u.tx ORDER BY u.ord), '{}')
    INTO o_ids, o_txids
    FROM unnest(p_ids, p_txids, p_deliver) WITH ORDINALITY AS u(id, tx, d, ord)
    WHERE u.d IS NULL OR u.d <= p_now;
END
$fn$;
