-- fanout._check_filter(p_t, p_filter): validates a group's subscription
-- filter (fanout.subscribe, fanout.set_filter) and returns it as stored:
-- NULL (no filter) for NULL or the empty object, which every message's
-- headers contain. A filter is a JSON object of at most 4096 bytes (as
-- text) that the headers of a message must contain (jsonb @>) for the
-- group to receive it. Not on a sequence-ordered topic: a group that passed
-- over part of an aggregate would wait for it for ever (turn sequence
-- ordering off first, fanout.alter_topic).
-- Raises PGQ03. Tables: none.
CREATE OR REPLACE FUNCTION fanout._check_filter(p_t fanout.topic, p_filter jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF p_filter IS NULL OR p_filter = '{}'::jsonb THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(p_filter) <> 'object' THEN
        RAISE EXCEPTION 'filter must be a JSON object (the headers a message must contain), got a JSON %',
            jsonb_typeof(p_filter) USING ERRCODE = 'PGQ03', HINT = 'e.g. filter => ''{"type": "order.created"}''';
    END IF;
    IF octet_length(p_filter::text) > 4096 THEN
        RAISE EXCEPTION 'filter must be at most 4096 bytes as text, got %', octet_length(p_filter::text)
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.sequence_ordering THEN
        RAISE EXCEPTION 'topic % has sequence_ordering: its groups cannot have a filter', quote_literal(p_t.topic)
            USING ERRCODE = 'PGQ03', HINT = 'fanout.alter_topic(topic, sequence_ordering => false) first';
    END IF;
    RETURN p_filter;
END
$fn$;
