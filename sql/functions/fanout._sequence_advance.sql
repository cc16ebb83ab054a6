-- fanout._sequence_advance(p_group_id, p_now): on a sequence-ordered topic, applies
-- the acks and dead letters recorded in fanout.seq_done since the group's
-- last read: each one that settled an aggregate's current message
-- (seq_state.msg_id) moves that aggregate's next_seq on by one, and
-- fanout._sequence_release moves it past the sequences cleanup dropped and
-- releases the waiter at its new turn into fanout.retry (due at p_now, the
-- read's clock), so this read hands it out. Called by
-- fanout.read with the group row held. Returns how many waiters it released.
-- Tables: fanout.seq_done, fanout.seq_state, fanout.seq_lost, fanout.seq_wait, fanout.retry.
CREATE OR REPLACE FUNCTION fanout._sequence_advance(p_group_id bigint, p_now timestamptz)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_aggs text[];
BEGIN
    WITH done AS (
        DELETE FROM fanout.seq_done d WHERE d.group_id = p_group_id RETURNING d.message_id),
    adv AS (
        UPDATE fanout.seq_state s SET next_seq = s.next_seq + 1, msg_id = NULL
        WHERE s.group_id = p_group_id AND s.msg_id IN (SELECT done.message_id FROM done)
        RETURNING s.message_group)
    SELECT array_agg(adv.message_group) INTO v_aggs FROM adv;
    IF v_aggs IS NULL THEN
        RETURN 0;
    END IF;
    -- Past the sequences cleanup dropped, then the waiter at the new turn.
    RETURN fanout._sequence_release(p_group_id, v_aggs, p_now);
END
$fn$;
