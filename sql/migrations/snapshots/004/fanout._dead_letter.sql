-- fanout._dead_letter(p_group_id, p_table, p_ids, p_txids, p_attempts, p_error):
-- moves messages to a group's dead letters, with a copy of each message so
-- that dead letters outlive partition drops; in reference mode a dead letter
-- counts as done for the group (fanout._complete_bits). Adds them to the
-- group's dead_lettered counter (fanout.group_stat). Returns how many were
-- written.
-- Tables: fanout.dead_letter, fanout.group_stat, fanout.seq_done,
-- fanout_data.m<topic_id> (and _done in reference mode).
CREATE OR REPLACE FUNCTION fanout._dead_letter(
    p_group_id bigint, p_table text, p_ids bigint[], p_txids xid8[], p_attempts int[], p_error text)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_n int;
BEGIN
    EXECUTE format(
        'INSERT INTO fanout.dead_letter AS d (group_id, message_id, txid, payload, headers, message_group,
                                               published_at, attempts, last_error, dead_at)
         SELECT $1, m.id, m.txid, m.payload, m.headers, m.message_group, m.published_at, u.att, $5, clock_timestamp()
         FROM unnest($2::bigint[], $3::xid8[], $4::int[]) AS u(id, tx, att)
         CROSS JOIN LATERAL (SELECT * FROM fanout_data.%I x WHERE x.txid = u.tx AND x.id = u.id OFFSET 0) m
         ON CONFLICT (group_id, message_id) DO UPDATE
         SET attempts = excluded.attempts, last_error = excluded.last_error, dead_at = excluded.dead_at',
        p_table)
        USING p_group_id, p_ids, p_txids, p_attempts, p_error;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n > 0 THEN
        INSERT INTO fanout.group_stat AS s (group_id, dead_lettered) VALUES (p_group_id, v_n)
        ON CONFLICT (group_id) DO UPDATE SET dead_lettered = s.dead_lettered + excluded.dead_lettered;
    END IF;
    PERFORM fanout._complete_bits(p_group_id, p_ids, p_txids, false);
    PERFORM fanout._sequence_settled(p_group_id, p_ids);  -- a dead letter does not block its successors
    RETURN v_n;
END
$fn$;
