-- fanout._sequence_gate(p_group_id, p_table, p_ids, p_txids): on a
-- sequence-ordered topic, filters a
-- page of the group's stream (fanout._window_walk) down to the messages
-- whose turn it is. Per (group, aggregate) fanout.seq_state holds next_seq:
-- every lower sequence was acked or dead-lettered. A message with sequence
--   = next_seq  is handed out (and recorded as seq_state.msg_id);
--   > next_seq  waits in fanout.seq_wait until its predecessor is done
--               (fanout._sequence_advance releases it into fanout.retry);
--   < next_seq  (only after a seek back) is handed out again, changing nothing.
-- Sequences start at 1 for every group and aggregate. Within one page the
-- messages are taken in page order, so a page holding sequences 1 and 2 of
-- an aggregate hands out 1 and parks 2. The caller holds the group row
-- (only reads write fanout.seq_state and fanout.seq_wait). A topic whose
-- sequence ordering fanout.alter_topic turned off since the caller looked it
-- up passes the page through unchanged (read under the group's lock, which
-- alter_topic takes before it commits).
-- Returns the ids and txids of the messages handed out, in page order.
-- Tables: fanout.seq_state, fanout.seq_wait, fanout.seq_lost, fanout_data.m<topic_id> (sequences).
CREATE OR REPLACE FUNCTION fanout._sequence_gate(
    p_group_id bigint, p_table text, p_ids bigint[], p_txids xid8[],
    OUT o_ids bigint[], OUT o_txids xid8[])
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_seqs   bigint[];
    v_groups text[];
    v_take   boolean[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM fanout.consumer_group g JOIN fanout.topic t ON t.topic_id = g.topic_id
                   WHERE g.group_id = p_group_id AND t.sequence_ordering) THEN
        o_ids := p_ids;
        o_txids := p_txids;
        RETURN;
    END IF;
    EXECUTE format(
        'SELECT array_agg(m.seq ORDER BY u.ord), array_agg(m.message_group ORDER BY u.ord)
         FROM unnest($1::bigint[], $2::xid8[]) WITH ORDINALITY AS u(id, tx, ord)
         CROSS JOIN LATERAL (SELECT x.seq, x.message_group FROM fanout_data.%I x
                             WHERE x.txid = u.tx AND x.id = u.id OFFSET 0) m',
        p_table) INTO v_seqs, v_groups USING p_ids, p_txids;
    INSERT INTO fanout.seq_state (group_id, message_group)
    SELECT DISTINCT p_group_id, g FROM unnest(v_groups) AS g
    ON CONFLICT DO NOTHING;
    -- An aggregate whose next sequence cleanup dropped before it was handed
    -- out (unread, or passed by a seek) does not wait for it.
    PERFORM fanout._sequence_release(p_group_id, v_groups, clock_timestamp());
    -- Per aggregate, in page order: the first message at next_seq (or
    -- below) goes out; everything above waits.
    WITH page AS (
        SELECT u.id, u.tx, u.g, u.s, u.ord, s.next_seq
        FROM unnest(p_ids, p_txids, v_groups, v_seqs) WITH ORDINALITY AS u(id, tx, g, s, ord)
        JOIN fanout.seq_state s ON s.group_id = p_group_id AND s.message_group = u.g),
    parked AS (
        INSERT INTO fanout.seq_wait (group_id, message_group, seq, message_id, txid, parked_at)
        SELECT p_group_id, p.g, p.s, p.id, p.tx, clock_timestamp() FROM page p WHERE p.s > p.next_seq
        ON CONFLICT DO NOTHING),
    turn AS (
        UPDATE fanout.seq_state s SET msg_id = p.id
        FROM page p
        WHERE s.group_id = p_group_id AND s.message_group = p.g AND p.s = p.next_seq)
    SELECT array_agg(p.s <= p.next_seq ORDER BY p.ord) INTO v_take FROM page p;
    SELECT coalesce(array_agg(u.id ORDER BY u.ord), '{}'), coalesce(array_agg(u.tx ORDER BY u.ord), '{}')
    INTO o_ids, o_txids
    FROM unnest(p_ids, p_txids, v_take) WITH ORDINALITY AS u(id, tx, take, ord)
    WHERE u.take;
END
$fn$;
