-- fanout._start_state(p_t, p_position, p_start_at, p_start_message_id,
-- p_max_backfill): where a new (or seeking) group starts reading, as the
-- initial read state: a window (o_lo, o_hi) and the lowest message id it will
-- receive (o_start_id).
--   latest      the current snapshot: exactly what commits after it.
--   earliest    all retained messages (the first window, from the origin
--               '1:1:' to the current snapshot), then everything after,
--   timestamp   retained messages published at or after p_start_at,
--   message_id  retained messages from p_start_message_id on;
-- the last three at most the newest p_max_backfill of them (NULL = no cap);
-- the cap applies to the history only: a message of a transaction still
-- running now is delivered when it commits, even if its id is lower.
-- o_effective_start_id is the first retained message it will get (NULL for
-- latest or when nothing qualifies).
-- Raises PGQ03: unknown position, missing start_at / start_message_id,
-- negative max_backfill, a start_message_id beyond the end of the topic.
-- Reads the topic's message table and id sequence.
CREATE OR REPLACE FUNCTION fanout._start_state(
    p_t fanout.topic, p_position text, p_start_at timestamptz, p_start_message_id bigint, p_max_backfill bigint,
    OUT o_lo pg_snapshot, OUT o_hi pg_snapshot, OUT o_start_id bigint, OUT o_effective_start_id bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_pos     text := fanout._normalize_option('start_position', p_position);
    v_next    bigint;
BEGIN
    IF p_max_backfill < 0 THEN
        RAISE EXCEPTION 'max_backfill must not be negative, got %', p_max_backfill USING ERRCODE = 'PGQ03';
    END IF;
    IF v_pos = 'latest' THEN
        o_lo := fanout._snapshot();
        o_hi := o_lo;
        o_start_id := 0;
        RETURN;
    END IF;
    v_next := fanout._next_id(p_t);
    -- The first window is the history, cut at o_start_id; what commits
    -- after this snapshot comes in later windows, whatever its id.
    o_lo := '1:1:';
    o_hi := fanout._snapshot();
    IF v_pos = 'earliest' THEN
        o_start_id := 0;
    ELSIF v_pos = 'timestamp' THEN
        IF p_start_at IS NULL THEN
            RAISE EXCEPTION 'start_position timestamp needs start_at' USING ERRCODE = 'PGQ03';
        END IF;
        EXECUTE format('SELECT min(id) FROM fanout_data.%I WHERE published_at >= $1', p_t.data_table)
            INTO o_start_id USING p_start_at;
        o_start_id := coalesce(o_start_id, v_next);
    ELSE
        IF p_start_message_id IS NULL OR p_start_message_id < 0 THEN
            RAISE EXCEPTION 'start_position message_id needs a non-negative start_message_id, got %',
                coalesce(p_start_message_id::text, 'NULL') USING ERRCODE = 'PGQ03';
        END IF;
        IF p_start_message_id > v_next THEN
            RAISE EXCEPTION 'start_message_id % is beyond the end of topic % (next id %)',
                p_start_message_id, quote_literal(p_t.topic), v_next USING ERRCODE = 'PGQ03';
        END IF;
        o_start_id := p_start_message_id;
    END IF;
    o_start_id := fanout._backfill_from(p_t, o_start_id, p_max_backfill);
    EXECUTE format('SELECT min(id) FROM fanout_data.%I WHERE id >= $1', p_t.data_table)
        INTO o_effective_start_id USING o_start_id;
END
$fn$;
