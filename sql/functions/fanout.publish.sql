-- fanout.publish(topic, payload, headers, message_group): appends one message
-- to a topic inside the caller's transaction (transactional outbox: it is
-- delivered only if, and once, the caller commits).
-- Returns the message id.
-- Raises: PGQ01 unknown topic, PGQ03 NULL payload or bad message_group,
-- PGQ05 payload + headers + message_group over max_payload_bytes (as text), PGQ06 headers not a JSON object,
-- PGQ07 pubsub topic with block_writes_without_subscriptions and no active group.
-- Tables: fanout.topic, fanout.consumer_group (pubsub with blocking only),
-- fanout_data.m<topic_id> (through fanout_data.m<topic_id>_insert).
CREATE OR REPLACE FUNCTION fanout.publish(
    topic         text,
    payload       jsonb,
    headers       jsonb DEFAULT '{}',
    message_group text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_t  fanout.topic;
    v_id bigint;
BEGIN
    PERFORM fanout._enter($1, 'publish');
    SELECT * INTO v_t FROM fanout.topic t WHERE t.topic = $1;
    -- The common case is checked inline; anything unusual goes through the
    -- full checks, which raise the precise error.
    IF v_t.topic_id IS NULL OR $2 IS NULL
       OR octet_length($2::text) + octet_length(coalesce($3, '{}')::text) > v_t.max_payload_bytes
       OR ($3 IS NOT NULL AND jsonb_typeof($3) <> 'object') OR $4 IS NOT NULL
       OR (v_t.semantics = 'pubsub' AND v_t.block_writes_without_subscriptions) THEN
        v_t := fanout._topic($1);
        PERFORM fanout._check_message(v_t, $2, $3, $4, NULL);
    END IF;
    -- Take the xid before the id: partition rotation relies on it.
    PERFORM pg_current_xact_id();
    EXECUTE format('SELECT fanout_data.%I($1, $2, $3)', v_t.data_table || '_insert')
        INTO v_id USING $2, coalesce($3, '{}'::jsonb), $4;
    RETURN v_id;
END
$fn$;
