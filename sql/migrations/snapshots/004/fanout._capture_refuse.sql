-- fanout._capture_refuse(p_topic, p_table, p_keys, p_nokey, p_payload,
-- p_headers, p_message_group, p_index): the checks of a captured message
-- that the generated trigger function (fanout._capture_generate) could not
-- pass with its cheap test in the INSERT of the messages; it calls this only
-- for such a message. p_nokey: the row lacks a column of the captured key
-- (p_keys, the list for the message): PGQ03. Else fanout._check_message with
-- the topic's row, as publish_batch checks element p_index (PGQ05, PGQ04,
-- PGQ07 for a pubsub topic that blocks writes without subscriptions, at
-- element 1). Returns p_payload when every check passes (the cheap test is
-- conservative: a message_group it cannot vouch for may still be valid).
-- Tables: fanout.topic, fanout.consumer_group (through _check_message).
CREATE OR REPLACE FUNCTION fanout._capture_refuse(
    p_topic text, p_table text, p_keys text, p_nokey boolean, p_payload jsonb, p_headers jsonb,
    p_message_group text, p_index bigint)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF p_nokey THEN
        RAISE EXCEPTION 'table % has no column % of its captured primary key any more', p_table, p_keys
            USING ERRCODE = 'PGQ03',
                  HINT = format('the table''s owner calls fanout.capture_table(%L, %L) again', p_table, p_topic);
    END IF;
    PERFORM fanout._check_message(fanout._topic(p_topic), p_payload, p_headers, p_message_group, p_index::int);
    RETURN p_payload;
END
$fn$;
