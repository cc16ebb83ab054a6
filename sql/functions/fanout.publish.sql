-- fanout.publish(topic, payload, headers, message_group): appends one message
-- to a topic inside the caller's transaction (transactional outbox: it is
-- delivered only if, and once, the caller commits).
-- Returns the message id.
-- Raises: PGQ01 unknown topic, PGQ03 NULL payload or bad message_group,
-- PGQ05 payload over max_payload_bytes, PGQ06 headers not a JSON object,
-- PGQ07 pubsub topic with block_writes_without_subscriptions and no active group.
-- Tables: fanout.topic, fanout.consumer_group (pubsub with blocking only),
-- fanout_data.m<topic_id>.
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
    v_t := fanout._topic($1);
    PERFORM fanout._check_message(v_t, $2, $3, $4, NULL);
    -- Take the xid before the id: partition rotation relies on it.
    PERFORM pg_current_xact_id();
    EXECUTE format('INSERT INTO fanout_data.%I (headers, message_group, payload) VALUES ($1, $2, $3) RETURNING id',
                   v_t.data_table)
        INTO v_id USING coalesce($3, '{}'::jsonb), $4, $2;
    RETURN v_id;
END
$fn$;
