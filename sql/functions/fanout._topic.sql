-- fanout._topic(p_topic): the catalog row of a topic by name (callers that
-- change it lock it themselves: a STABLE function cannot). Names are looked up
-- in NFC (fanout._nfc).
-- Raises: PGQ03 (NULL name), PGQ01 (no such topic). Reads fanout.topic.
CREATE OR REPLACE FUNCTION fanout._topic(p_topic text)
RETURNS fanout.topic
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_t fanout.topic;
BEGIN
    IF p_topic IS NULL THEN
        RAISE EXCEPTION 'topic must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    SELECT * INTO v_t FROM fanout.topic t WHERE t.topic = fanout._nfc(p_topic);
    IF v_t.topic_id IS NULL THEN
        RAISE EXCEPTION 'topic % does not exist', quote_literal(p_topic)
            USING ERRCODE = 'PGQ01', HINT = 'create it with fanout.create_topic()';
    END IF;
    RETURN v_t;
END
$fn$;
