-- fanout._sequence_advance(p_group_id, p_now): on a sequence-ordered topic, applies
-- the acks and dead letters recorded in fanout.seq_done since the group's
-- last read: each one that settled an aggregate's current message
-- (seq_state.msg_id) moves that aggregate's next_seq on by one, and the
-- waiter with the new next_seq (past the sequences cleanup dropped while
-- they waited, fanout.seq_lost), if any, leaves fanout.seq_wait for
-- fanout.retry (due at p_now, the read's clock, attempt 0), so this read
-- hands it out. Called by
-- fanout.read with the group row held. Returns how many waiters it released.
-- Tables: fanout.seq_done, fanout.seq_state, fanout.seq_lost, fanout.seq_wait, fanout.retry.
CREATE OR REPLACE FUNCTION fanout._sequence_advance(p_group_id bigint, p_now timestamptz)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_aggs text[];
    v_n    int;
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
    -- Sequences whose waiting message cleanup dropped (fanout.seq_lost):
    -- passed over when their turn comes.
    IF EXISTS (SELECT 1 FROM fanout.seq_lost x WHERE x.group_id = p_group_id) THEN
        LOOP
            WITH skip AS (
                DELETE FROM fanout.seq_lost x
                USING fanout.seq_state s
                WHERE s.group_id = p_group_id AND s.message_group = ANY (v_aggs)
                  AND x.group_id = p_group_id AND x.message_group = s.message_group AND x.seq = s.next_seq
                RETURNING x.message_group)
            UPDATE fanout.seq_state s SET next_seq = s.next_seq + 1
            FROM skip WHERE s.group_id = p_group_id AND s.message_group = skip.message_group;
            EXIT WHEN NOT FOUND;
        END LOOP;
    END IF;
    WITH rel AS (
        DELETE FROM fanout.seq_wait w
        USING fanout.seq_state s
        WHERE s.group_id = p_group_id AND s.message_group = ANY (v_aggs)
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
