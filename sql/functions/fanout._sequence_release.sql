-- fanout._sequence_release(p_group_id, p_aggs, p_now): for each of the
-- group's aggregates in p_aggs with no message out (seq_state.msg_id NULL):
-- moves it past the sequences cleanup dropped before the group acked them
-- (fanout.seq_lost), unless a message of that sequence waits (published
-- again since), so that it never waits for a message that is gone; then the
-- waiter at its turn, if any, leaves fanout.seq_wait for fanout.retry (due
-- at p_now, attempt 0) and becomes the aggregate's current message.
-- Called with the group row held, by fanout._sequence_advance (aggregates
-- whose current message was just acked or dead-lettered) and
-- fanout._sequence_gate (aggregates of a page). Returns how many waiters it
-- released.
-- Tables: fanout.seq_lost, fanout.seq_state, fanout.seq_wait, fanout.retry.
CREATE OR REPLACE FUNCTION fanout._sequence_release(p_group_id bigint, p_aggs text[], p_now timestamptz)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_n int;
BEGIN
    IF EXISTS (SELECT 1 FROM fanout.seq_lost x WHERE x.group_id = p_group_id) THEN
        LOOP
            WITH skip AS (
                DELETE FROM fanout.seq_lost x
                USING fanout.seq_state s
                WHERE s.group_id = p_group_id AND s.message_group = ANY (p_aggs) AND s.msg_id IS NULL
                  AND x.group_id = p_group_id AND x.message_group = s.message_group AND x.seq = s.next_seq
                  AND NOT EXISTS (SELECT 1 FROM fanout.seq_wait w
                                  WHERE w.group_id = p_group_id AND w.message_group = s.message_group
                                    AND w.seq = s.next_seq)
                RETURNING x.message_group)
            UPDATE fanout.seq_state s SET next_seq = s.next_seq + 1
            FROM skip WHERE s.group_id = p_group_id AND s.message_group = skip.message_group;
            EXIT WHEN NOT FOUND;
        END LOOP;
    END IF;
    WITH rel AS (
        DELETE FROM fanout.seq_wait w
        USING fanout.seq_state s
        WHERE s.group_id = p_group_id AND s.message_group = ANY (p_aggs) AND s.msg_id IS NULL
          AND w.group_id = p_group_id AND w.message_group = s.message_group AND w.seq = s.next_seq
        RETURNING w.message_group, w.message_id, w.txid),
    due AS (
        INSERT INTO fanout.retry (group_id, message_id, txid, attempt, not_before)
        SELECT p_group_id, rel.message_id, rel.txid, 0, p_now FROM rel
        ON CONFLICT DO NOTHING)
    UPDATE fanout.seq_state s SET msg_id = rel.message_id
    FROM rel WHERE s.group_id = p_group_id AND s.message_group = rel.message_group;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$fn$;
