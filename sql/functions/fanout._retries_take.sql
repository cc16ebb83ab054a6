-- fanout._retries_take(p_t, p_group, p_kpart, p_left, p_now): takes up to
-- p_left due retries (nacked, delayed, replayed or taken-over messages
-- whose not_before has come) of group p_group out of fanout.retry, as the
-- next page's redeliveries (attempt grown by one). Shared by fanout._group_read
-- (p_kpart NULL: the group's, in (not_before, message_id) order) and
-- fanout._kpart_claim (a key partition's and those without a partition, from
-- replay, in commit order; rows another partition's read is taking are
-- passed by, FOR UPDATE SKIP LOCKED: picked and then found gone, they left
-- the page empty and the partition's own due retry behind its stream). With
-- whole_transactions (partitioned topics) the page also takes the rest of
-- its last producer transaction's due retries, up to 10,000 in all; a
-- longer transaction is split there and an event_log row says so.
-- Returns parallel arrays (ids, txids, attempts; NULL when none).
-- Tables: fanout.retry, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout._retries_take(
    p_t fanout.topic, p_group fanout.consumer_group, p_kpart int, p_left int, p_now timestamptz,
    OUT o_ids bigint[], OUT o_txids xid8[], OUT o_atts int[])
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    c_cap  constant int := 10000;  -- whole_transactions: hard cap of a page
    v_last xid8;                   -- whole_transactions: txid of the page's last message
    v_pick bigint[];
BEGIN
    IF p_kpart IS NULL THEN
        v_pick := ARRAY(SELECT d.message_id FROM fanout.retry d
                        WHERE d.group_id = p_group.group_id AND d.not_before <= p_now
                        ORDER BY d.not_before, d.message_id LIMIT p_left);
    ELSE
        IF p_t.whole_transactions THEN
            SELECT d.txid INTO v_last FROM fanout.retry d
            WHERE d.group_id = p_group.group_id AND d.not_before <= p_now
              AND (d.kpart = p_kpart OR d.kpart IS NULL)
            ORDER BY d.txid, d.message_id OFFSET p_left - 1 LIMIT 1
            FOR UPDATE SKIP LOCKED;  -- as the pick below
        END IF;
        v_pick := ARRAY(SELECT d.message_id FROM fanout.retry d
                        WHERE d.group_id = p_group.group_id AND d.not_before <= p_now
                          AND (d.kpart = p_kpart OR d.kpart IS NULL)
                          AND (v_last IS NULL OR d.txid <= v_last)
                        ORDER BY d.txid, d.message_id
                        LIMIT CASE WHEN v_last IS NULL THEN p_left ELSE c_cap END
                        FOR UPDATE SKIP LOCKED);
    END IF;
    IF cardinality(v_pick) = 0 THEN
        RETURN;  -- the common page: nothing due (no delete to plan and run)
    END IF;
    WITH due AS (
        DELETE FROM fanout.retry rt
        WHERE rt.group_id = p_group.group_id AND rt.message_id = ANY (v_pick)
        RETURNING rt.message_id, rt.txid, rt.attempt, rt.not_before)
    SELECT array_agg(due.message_id ORDER BY k.ord), array_agg(due.txid ORDER BY k.ord),
           array_agg(due.attempt + 1 ORDER BY k.ord)
    INTO o_ids, o_txids, o_atts
    FROM due JOIN unnest(v_pick) WITH ORDINALITY AS k(id, ord) ON k.id = due.message_id;
    IF v_last IS NOT NULL AND cardinality(o_ids) = c_cap
       AND EXISTS (SELECT 1 FROM fanout.retry d
                   WHERE d.group_id = p_group.group_id AND d.not_before <= p_now
                     AND (d.kpart = p_kpart OR d.kpart IS NULL) AND d.txid = v_last) THEN
        INSERT INTO fanout.event_log (topic, group_name, kind, count, detail)
        VALUES (p_t.topic, p_group.group_name, 'transaction_split', c_cap,
                jsonb_build_object('partition', p_kpart, 'txid', v_last::text, 'cap', c_cap,
                                   'last_id', o_ids[c_cap], 'retries', true));
    END IF;
END
$fn$;
