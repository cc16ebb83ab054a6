-- fanout._page_finish_tx(p_group_id, p_table, p_kpart, p_level, p_mask,
-- p_have, p_txid, p_id): whole_transactions. The rest of producer
-- transaction p_txid after (p_txid, p_id), the last message of a page of
-- p_have messages that ended inside it (by count or by bytes), in the same
-- scan (key partition p_kpart, priority level p_level, reference mask
-- p_mask) through the topic's m<id>_page: its txid is committed and in the
-- window, so all its rows are there. Up to 10,000 messages in the page in
-- all; a longer transaction is split there and an event_log row (kind
-- 'transaction_split') says so. Called by fanout._window_walk.
-- Returns the extension as parallel arrays (ids, txids, deliver_at; empty
-- when there is none). Tables: the topic's message table, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout._page_finish_tx(
    p_group_id bigint, p_table text, p_kpart int, p_level int, p_mask bigint, p_have int, p_txid xid8, p_id bigint,
    OUT o_ids bigint[], OUT o_txids xid8[], OUT o_deliver timestamptz[])
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    c_cap  constant int := 10000;  -- hard cap of a page
    v_room int := greatest(c_cap - p_have, 0);
    v_sz   int[];
    v_used bigint;
BEGIN
    EXECUTE format('SELECT p.o_ids, p.o_txids, p.o_deliver, p.o_sizes, p.o_bytes
                    FROM fanout_data.%I($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL) p', p_table || '_page')
        INTO o_ids, o_txids, o_deliver, v_sz, v_used
        USING p_kpart, p_level, ARRAY[p_txid], NULL::xid8, NULL::xid8[], p_txid, p_id, p_id, v_room + 1, p_mask;
    IF coalesce(cardinality(o_ids), 0) > v_room THEN
        o_ids := o_ids[1:v_room]; o_txids := o_txids[1:v_room]; o_deliver := o_deliver[1:v_room];
        INSERT INTO fanout.event_log (topic, group_name, kind, count, detail)
        SELECT t.topic, g.group_name, 'transaction_split', c_cap, jsonb_build_object(
                   'partition', p_kpart, 'txid', coalesce(o_txids[v_room], p_txid)::text, 'cap', c_cap,
                   'last_id', coalesce(o_ids[v_room], p_id))
        FROM fanout.consumer_group g JOIN fanout.topic t USING (topic_id) WHERE g.group_id = p_group_id;
    END IF;
    o_ids := coalesce(o_ids, '{}'); o_txids := coalesce(o_txids, '{}'); o_deliver := coalesce(o_deliver, '{}');
END
$fn$;
