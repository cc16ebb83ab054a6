-- fanout._check_message(p_t, p_payload, p_headers, p_message_group, p_index):
-- the checks publish and publish_batch make before writing (p_index names the
-- batch element in messages; NULL for a single publish).
-- Raises PGQ03, PGQ05, PGQ06, PGQ07 (see fanout.publish).
-- Tables: fanout.consumer_group (pubsub with blocking only).
CREATE OR REPLACE FUNCTION fanout._check_message(
    p_t fanout.topic, p_payload jsonb, p_headers jsonb, p_message_group text, p_index int)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_where text := CASE WHEN p_index IS NULL THEN '' ELSE format(' (element %s)', p_index) END;
    v_size  bigint;
BEGIN
    IF p_payload IS NULL THEN
        RAISE EXCEPTION 'payload must not be NULL%', v_where USING ERRCODE = 'PGQ03';
    END IF;
    IF p_headers IS NOT NULL AND jsonb_typeof(p_headers) <> 'object' THEN
        RAISE EXCEPTION 'headers must be a JSON object%, got a JSON %', v_where, jsonb_typeof(p_headers)
            USING ERRCODE = 'PGQ06';
    END IF;
    -- Uncompressed: the JSON text of payload and headers, plus message_group
    -- (pg_column_size would measure a compressible payload compressed).
    v_size := octet_length(p_payload::text) + coalesce(octet_length(p_headers::text), 0)
              + coalesce(octet_length(p_message_group), 0);
    IF v_size > p_t.max_payload_bytes THEN
        RAISE EXCEPTION 'message is % bytes% (payload, headers and message_group as text), over the topic''s max_payload_bytes %',
            v_size, v_where, p_t.max_payload_bytes USING ERRCODE = 'PGQ05';
    END IF;
    IF p_message_group IS NOT NULL THEN
        PERFORM fanout._check_name('message_group', p_message_group);
    END IF;
    IF p_t.semantics = 'pubsub' AND p_t.block_writes_without_subscriptions
       AND (p_index IS NULL OR p_index = 1)
       AND NOT EXISTS (SELECT 1 FROM fanout.consumer_group g
                       WHERE g.topic_id = p_t.topic_id AND g.status = 'active') THEN
        RAISE EXCEPTION 'topic % has zero active subscriptions and blocks writes without them',
            quote_literal(p_t.topic) USING ERRCODE = 'PGQ07',
            HINT = 'subscribe a group first, or alter_topic(block_writes_without_subscriptions => false)';
    END IF;
END
$fn$;
