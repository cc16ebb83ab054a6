-- fanout._check_order_options(p_t, p_priority, p_seq, p_message_group,
-- p_deliver_at, p_element): validates the ordering options of one message
-- before anything is written. priority must be 0..9; a sequence-ordered topic
-- requires a sequence (1 or more) and a message_group (the aggregate), and
-- refuses a priority above 0 or a delivery time (either would hand a
-- message out of its sequence's turn); any other topic refuses a sequence,
-- except one whose sequence ordering alter_topic turned off
-- (sequence_dropped_at): its producers may go on passing sequences (1 or
-- more), which then only deduplicate.
-- A partitioned topic takes priorities like any other: each key
-- partition's window is read by priority level (fanout._window_walk).
-- p_element names the publish_batch element (NULL for publish).
-- Raises PGQ03 (out of range, missing), PGQ23 (not allowed on this topic).
-- Touches no table.
CREATE OR REPLACE FUNCTION fanout._check_order_options(
    p_t fanout.topic, p_priority int, p_seq bigint, p_message_group text, p_deliver_at timestamptz,
    p_element int)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_at text := CASE WHEN p_element IS NOT NULL THEN format(' (element %s)', p_element) ELSE '' END;
BEGIN
    IF p_priority < 0 OR p_priority > 9 THEN
        RAISE EXCEPTION 'priority must be between 0 and 9, got %', p_priority USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.sequence_ordering THEN
        IF p_priority > 0 THEN
            RAISE EXCEPTION 'topic % has sequence_ordering: priority is not allowed', quote_literal(p_t.topic)
                USING ERRCODE = 'PGQ23',
                      HINT = 'priority and per-aggregate sequence ordering cannot be combined on one topic';
        END IF;
        IF p_deliver_at IS NOT NULL THEN
            RAISE EXCEPTION 'topic % has sequence_ordering: deliver_at and delay are not allowed',
                quote_literal(p_t.topic) USING ERRCODE = 'PGQ23';
        END IF;
        IF p_seq IS NULL OR p_message_group IS NULL THEN
            RAISE EXCEPTION 'topic % has sequence_ordering: every message needs a sequence and a message_group%',
                quote_literal(p_t.topic), v_at
                USING ERRCODE = 'PGQ03', HINT = 'message_group names the aggregate, sequence counts from 1 in it';
        END IF;
        IF p_seq < 1 THEN
            RAISE EXCEPTION '%', format('sequence must be 1 or more, got %s%s', p_seq, v_at) USING ERRCODE = 'PGQ03';
        END IF;
    ELSIF p_seq IS NOT NULL AND p_t.sequence_dropped_at IS NOT NULL THEN
        IF p_seq < 1 THEN
            RAISE EXCEPTION '%', format('sequence must be 1 or more, got %s%s', p_seq, v_at) USING ERRCODE = 'PGQ03';
        END IF;
    ELSIF p_seq IS NOT NULL THEN
        RAISE EXCEPTION 'topic % was not created with sequence_ordering: sequence is not allowed%',
            quote_literal(p_t.topic), v_at
            USING ERRCODE = 'PGQ23', HINT = 'create the topic with sequence_ordering => true';
    END IF;
END
$fn$;
