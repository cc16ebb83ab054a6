-- fanout.publish(topic, payload, headers, message_group, notify, dedupe_key,
-- deliver_at, delay, priority, sequence): appends one
-- message to a topic inside the caller's transaction (transactional outbox:
-- it is delivered only if, and once, the caller commits). notify overrides
-- the topic's NOTIFY setting for this call (NULL = the topic's); pass false
-- inside a transaction that will be prepared (two-phase commit): PostgreSQL
-- refuses to PREPARE a transaction that sent a NOTIFY. dedupe_key makes the
-- publish idempotent within the topic's dedupe_window (a repeated key returns
-- the first message's id and inserts nothing); deliver_at (or delay, from
-- now) holds the message back from every group until then (see
-- fanout._publish_one and fanout._window_walk); priority (0..9, default 0)
-- hands it out before lower priorities (fanout._window_walk);
-- sequence (required on a topic created with sequence_ordering, with
-- message_group as the aggregate) holds it back until every lower sequence
-- of its aggregate was acked or dead-lettered (fanout._sequence_gate).
-- Returns the message id.
-- Raises: PGQ01 unknown topic, PGQ03 NULL payload or bad message_group (or
-- dedupe_key, or deliver_at and delay both given, or a delay over 366 days),
-- PGQ05 payload + headers + message_group over max_payload_bytes (as text), PGQ06 headers not a JSON object,
-- PGQ07 pubsub topic with block_writes_without_subscriptions and no active group,
-- PGQ03 priority outside 0..9, sequence below 1 or missing (or message_group
-- missing) on a sequence-ordered topic, PGQ23 priority, deliver_at or delay on
-- a sequence-ordered topic, or sequence on a topic without sequence_ordering.
-- Tables: fanout.topic, fanout.consumer_group (pubsub with blocking only),
-- fanout_data.m<topic_id> (through fanout_data.m<topic_id>_insert), and
-- fanout_data.m<topic_id>_dedupe with a dedupe_key.
CREATE OR REPLACE FUNCTION fanout.publish(
    topic         text,
    payload       jsonb,
    headers       jsonb DEFAULT '{}',
    message_group text DEFAULT NULL,
    notify        boolean DEFAULT NULL,
    dedupe_key    text DEFAULT NULL,
    deliver_at    timestamptz DEFAULT NULL,
    delay         interval DEFAULT NULL,
    priority      int DEFAULT NULL,
    sequence      bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_t      fanout.topic;
    v_id     bigint;
    v_at     timestamptz;
BEGIN
    -- The caller's grant, the topic and its quota in one query; anything
    -- unusual raises the precise error there.
    v_t := fanout._enter_topic($1, 'publish');
    -- The common case is checked inline; anything unusual goes through the
    -- full checks, which raise the precise error.
    IF v_t.topic_id IS NULL OR $2 IS NULL
       OR octet_length($2::text) + octet_length(coalesce($3, '{}')::text) > v_t.max_payload_bytes
       OR ($3 IS NOT NULL AND jsonb_typeof($3) <> 'object') OR $4 IS NOT NULL
       OR (v_t.semantics = 'pubsub' AND v_t.block_writes_without_subscriptions) THEN
        v_t := fanout._topic($1);
        PERFORM fanout._check_message(v_t, $2, $3, $4, NULL);
    END IF;
    IF $6 IS NOT NULL OR $7 IS NOT NULL OR $8 IS NOT NULL OR $9 IS NOT NULL OR $10 IS NOT NULL
       OR v_t.sequence_ordering THEN
        v_at := fanout._delivery_time($7, $8);
        PERFORM fanout._check_order_options(v_t, $9, $10, $4, v_at, NULL);
        PERFORM fanout._notify_override(v_t, $5, true);
        v_id := fanout._publish_one(v_t, $2, $3, $4, $6, v_at, $9, $10);
        PERFORM fanout._notify_override(v_t, $5, false);
        RETURN v_id;
    END IF;
    -- Take the xid before the id: partition rotation relies on it.
    PERFORM pg_current_xact_id();
    IF $5 IS NOT NULL THEN
        PERFORM fanout._notify_override(v_t, $5, true);
    END IF;
    EXECUTE format('SELECT fanout_data.%I($1, $2, $3)', v_t.data_table || '_insert')
        INTO v_id USING $2, coalesce($3, '{}'::jsonb), $4;
    IF $5 IS NOT NULL THEN
        PERFORM fanout._notify_override(v_t, $5, false);
    END IF;
    RETURN v_id;
END
$fn$;
