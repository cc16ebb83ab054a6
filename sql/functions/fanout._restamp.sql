-- fanout._restamp(p_topic_id, p_txid, p_required): reference mode: the
-- required_groups stamp a message of transaction p_txid should carry, given
-- the stamp p_required it was inserted with: the groups active or paused
-- now (topic_state.required_mask), keeping those it had and adding those
-- whose join snapshot does not see the transaction (they joined, or came
-- back, before it committed); released groups' bits go. Used by
-- fanout._reconcile_stamps and fanout.message_status. Reads fanout.topic_state,
-- fanout.consumer_group.
CREATE OR REPLACE FUNCTION fanout._restamp(p_topic_id bigint, p_txid xid8, p_required bigint)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT s.required_mask
           & (p_required | (SELECT coalesce(bit_or(1::bigint << g.bit_no), 0) FROM fanout.consumer_group g
                            WHERE g.topic_id = p_topic_id AND g.bit_no IS NOT NULL
                              AND g.status IN ('active', 'paused')
                              AND NOT pg_visible_in_snapshot(p_txid, g.join_snap)))
    FROM fanout.topic_state s WHERE s.topic_id = p_topic_id
$fn$;
