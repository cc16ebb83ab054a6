-- fanout._lease_take_over(p_t, p_group_id, p_l, p_left, p_now): takes the
-- un-settled messages of an expired lease p_l (locked by the caller) away
-- from it, in its order, at most p_left of them (NULL: all): each becomes a
-- redelivery with its attempt grown by one, or, when that would exceed the
-- topic's max_attempts, a dead letter of the group, whose last_error names
-- the lease by the id read returned (fanout._lease_code; tenants read it in
-- fanout.dead_letters, and the internal id counts the slots of every
-- topic). The old lease can no
-- longer ack them (fencing: fanout._lease_settle records them as
-- reclaimed). Shared by fanout.read (the group's expired leases) and
-- fanout._kpart_claim (a key partition's expired page).
-- Returns the redeliveries as parallel arrays (ids, txids, attempts; NULL
-- when none). Tables: fanout.lease, fanout.dead_letter, fanout.lease_key.
CREATE OR REPLACE FUNCTION fanout._lease_take_over(
    p_t fanout.topic, p_group_id bigint, p_l fanout.lease, p_left int, p_now timestamptz,
    OUT o_ids bigint[], OUT o_txids xid8[], OUT o_atts int[])
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v record;
BEGIN
    SELECT array_agg(u.id ORDER BY u.ord) FILTER (WHERE u.att < p_t.max_attempts) AS ids,
           array_agg(u.tx ORDER BY u.ord) FILTER (WHERE u.att < p_t.max_attempts) AS txids,
           array_agg(u.att + 1 ORDER BY u.ord) FILTER (WHERE u.att < p_t.max_attempts) AS atts,
           array_agg(u.id ORDER BY u.ord) FILTER (WHERE u.att >= p_t.max_attempts) AS dead_ids,
           array_agg(u.tx ORDER BY u.ord) FILTER (WHERE u.att >= p_t.max_attempts) AS dead_txids,
           array_agg(u.att ORDER BY u.ord) FILTER (WHERE u.att >= p_t.max_attempts) AS dead_atts,
           array_agg(u.id ORDER BY u.ord) AS all_ids
    INTO v
    FROM (SELECT o.id, o.tx, o.att, o.ord
          FROM unnest(p_l.msg_ids, p_l.msg_txids, p_l.attempts) WITH ORDINALITY AS o(id, tx, att, ord)
          WHERE o.id <> ALL (p_l.settled) AND o.id <> ALL (p_l.reclaimed)
          ORDER BY o.ord
          LIMIT p_left) u;
    IF v.dead_ids IS NOT NULL THEN
        PERFORM fanout._dead_letter(p_group_id, p_t.data_table, v.dead_ids, v.dead_txids, v.dead_atts,
                                    format('lease %s expired on delivery attempt %s of %s',
                                           fanout._lease_code(p_l.lease_id, true), p_t.max_attempts, p_t.max_attempts));
    END IF;
    PERFORM fanout._lease_settle(p_l.lease_id, v.all_ids, true, true, p_now);
    o_ids := v.ids;
    o_txids := v.txids;
    o_atts := v.atts;
END
$fn$;
