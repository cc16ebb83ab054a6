-- fanout._publish_one(p_t, p_payload, p_headers, p_message_group,
-- p_dedupe_key, p_deliver_at, p_priority, p_seq): appends one message with the options the
-- plain insert path does not take (the message was checked by the caller).
--   p_dedupe_key  idempotent publish: within the topic's dedupe_window a
--                 key that was already published returns that message's id
--                 and inserts nothing. The key is claimed in the topic's
--                 fanout_data.m<id>_dedupe (through m<id>_insert_claimed,
--                 or m<id>_claim with a sequence)
--                 before the message gets its id: a concurrent publisher of
--                 the same key waits for the first one's transaction, then
--                 gets its id (or takes the key if it rolled back). Under
--                 REPEATABLE READ that wait ends in a serialization failure
--                 (40001) instead: retry the transaction.
--   p_deliver_at  the message is stored now and handed out from then on
--                 (fanout._window_walk defers it per group).
--   p_priority    0..9 (checked by fanout._check_order_options); 0 is
--                 stored as NULL. The first priority above 0 marks the
--                 topic prioritized (reads order windows by priority).
--   p_seq         sequence of the message in its aggregate (message_group)
--                 on a sequence-ordered topic: a (group, sequence) published
--                 before returns that message's id and inserts nothing
--                 (fanout.seq_published; concurrent publishers wait as for
--                 dedupe keys).
-- Returns the message id. Raises PGQ03 (empty or over-long dedupe key).
-- Tables: fanout_data.m<topic_id>_dedupe, fanout.seq_published, fanout.topic (prioritized),
-- fanout_data.m<topic_id> (through m<id>_insert_one or m<id>_insert_claimed).
CREATE OR REPLACE FUNCTION fanout._publish_one(
    p_t fanout.topic, p_payload jsonb, p_headers jsonb, p_message_group text,
    p_dedupe_key text, p_deliver_at timestamptz, p_priority int DEFAULT NULL, p_seq bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_id    bigint;
    v_taken bigint;
BEGIN
    IF p_dedupe_key IS NOT NULL THEN
        IF p_dedupe_key = '' OR octet_length(p_dedupe_key) > 512 AND length(p_dedupe_key) > 512 THEN
            RAISE EXCEPTION 'dedupe_key must have 1 to 512 characters, got %', length(p_dedupe_key)
                USING ERRCODE = 'PGQ03';
        END IF;
        IF p_seq IS NULL THEN
            -- The claim and the insert in one generated call; then, when the
            -- key was claimed (its id is the one just taken), the topic is
            -- marked prioritized: the key first, then the topic row, the
            -- order of every publish path.
            PERFORM pg_current_xact_id();
            EXECUTE format('SELECT fanout_data.%I($1, $2, $3, $4, $5, $6, $7)', p_t.data_table || '_insert_claimed')
                INTO v_id USING p_dedupe_key, p_t.dedupe_window, p_payload, coalesce(p_headers, '{}'::jsonb),
                                p_message_group, p_deliver_at, nullif(p_priority, 0)::smallint;
            IF p_priority > 0 AND NOT p_t.prioritized
               AND v_id = currval(format('fanout_data.%I', p_t.seq_name)::regclass) THEN
                UPDATE fanout.topic t SET prioritized = true WHERE t.topic_id = p_t.topic_id AND NOT t.prioritized;
            END IF;
            RETURN v_id;
        END IF;
        -- The xid before the id (partition rotation relies on it).
        PERFORM pg_current_xact_id();
        v_id := nextval(format('fanout_data.%I', p_t.seq_name)::regclass);
        EXECUTE format('SELECT fanout_data.%I($1, $2, $3)', p_t.data_table || '_claim')
            INTO v_taken USING p_dedupe_key, v_id, p_t.dedupe_window;
        IF v_taken <> v_id THEN
            -- Published before, within the window: its id, nothing inserted.
            RETURN v_taken;
        END IF;
    END IF;
    IF p_seq IS NOT NULL THEN
        PERFORM pg_current_xact_id();
        IF v_id IS NULL THEN
            v_id := nextval(format('fanout_data.%I', p_t.seq_name)::regclass);
        END IF;
        INSERT INTO fanout.seq_published AS s (topic_id, message_group, seq, message_id, created_at)
        VALUES (p_t.topic_id, p_message_group, p_seq, v_id, clock_timestamp())
        ON CONFLICT (topic_id, message_group, seq) DO NOTHING
        RETURNING s.message_id INTO v_taken;
        IF v_taken IS NULL THEN
            -- This sequence of the aggregate was published before: its id.
            SELECT s.message_id INTO STRICT v_taken FROM fanout.seq_published s
            WHERE s.topic_id = p_t.topic_id AND s.message_group = p_message_group AND s.seq = p_seq;
            IF p_dedupe_key IS NOT NULL THEN
                EXECUTE format('UPDATE fanout_data.%I d SET message_id = $1 WHERE d.dedupe_key = $2',
                               p_t.data_table || '_dedupe')
                    USING v_taken, p_dedupe_key;
            END IF;
            RETURN v_taken;
        END IF;
    END IF;
    IF p_priority > 0 AND NOT p_t.prioritized THEN
        UPDATE fanout.topic t SET prioritized = true WHERE t.topic_id = p_t.topic_id AND NOT t.prioritized;
    END IF;
    PERFORM pg_current_xact_id();
    EXECUTE format('SELECT fanout_data.%I($1, $2, $3, $4, $5, $6, $7)', p_t.data_table || '_insert_one')
        INTO v_id USING v_id, p_payload, coalesce(p_headers, '{}'::jsonb), p_message_group, p_deliver_at,
                        nullif(p_priority, 0)::smallint, p_seq;
    RETURN v_id;
END
$fn$;
