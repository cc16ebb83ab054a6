-- fanout._normalize_option(p_kind, p_value): maps user spellings (including the
-- seed vocabulary QUEUE, PUB_SUB, REFERENCE_COUNTING, OFFSET_WATERMARK,
-- EARLIEST, LATEST, TIMESTAMP, MESSAGE_ID; any case) to canonical lower-case
-- values. p_kind is 'semantics', 'completion' or 'start_position'.
-- Raises PGQ03 for NULL or unknown values. Touches no table.
CREATE OR REPLACE FUNCTION fanout._normalize_option(p_kind text, p_value text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v text := lower(btrim(p_value));
    v_out text;
BEGIN
    IF p_value IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', p_kind USING ERRCODE = 'PGQ03';
    END IF;
    v_out := CASE p_kind
        WHEN 'semantics' THEN
            CASE v WHEN 'queue' THEN 'queue'
                   WHEN 'pubsub' THEN 'pubsub' WHEN 'pub_sub' THEN 'pubsub' WHEN 'pub-sub' THEN 'pubsub'
            END
        WHEN 'completion' THEN
            CASE v WHEN 'offset' THEN 'offset' WHEN 'offset_watermark' THEN 'offset'
                   WHEN 'reference' THEN 'reference' WHEN 'reference_counting' THEN 'reference'
            END
        WHEN 'start_position' THEN
            CASE v WHEN 'latest' THEN 'latest' WHEN 'earliest' THEN 'earliest'
                   WHEN 'timestamp' THEN 'timestamp' WHEN 'message_id' THEN 'message_id'
            END
    END;
    IF v_out IS NULL THEN
        RAISE EXCEPTION 'invalid % %', p_kind, quote_literal(p_value)
            USING ERRCODE = 'PGQ03',
                  HINT = CASE p_kind
                      WHEN 'semantics' THEN 'use queue or pubsub'
                      WHEN 'completion' THEN 'use offset or reference'
                      ELSE 'use latest, earliest, timestamp or message_id' END;
    END IF;
    RETURN v_out;
END
$fn$;
