-- fanout._scheduled_count(p_topic_id): how many messages of a topic were
-- published with a deliver_at that is still in the future (fanout.topics'
-- scheduled column; a partial index on deliver_at serves it).
-- NULL for a topic the caller has no grant on. Reads fanout.topic,
-- fanout.topic_grant and the topic's message table.
CREATE OR REPLACE FUNCTION fanout._scheduled_count(p_topic_id bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_table text;
    v_n     bigint;
BEGIN
    SELECT t.data_table INTO v_table FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    IF v_table IS NULL
       OR NOT fanout._may((SELECT t.topic FROM fanout.topic t WHERE t.topic_id = p_topic_id), 'any') THEN
        RETURN NULL;  -- no such topic, or one the caller may not see
    END IF;
    EXECUTE format('SELECT count(*) FROM fanout_data.%I WHERE deliver_at > clock_timestamp()', v_table) INTO v_n;
    RETURN v_n;
END
$fn$;
