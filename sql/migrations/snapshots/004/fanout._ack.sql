-- fanout._ack(p_lease_id, p_ids, p_checked): fanout.ack's work (see there),
-- shared with read(..., ack =>), which passes p_checked: it has checked the
-- caller's consume grant on the lease's topic in the same call
-- (fanout._lock_lease does not check it again).
-- Returns how many messages were settled. Raises as fanout.ack.
-- Tables: as fanout.ack; fanout.group_tally (fanout._tally: the group's ack counter).
CREATE OR REPLACE FUNCTION fanout._ack(p_lease_id bigint, p_ids bigint[], p_checked boolean)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_l       fanout.lease;
    v_targets bigint[];
    v_n       int;
    v_ref     boolean;
    v_seq     boolean;
BEGIN
    v_l := fanout._lock_lease(p_lease_id, p_checked);
    v_targets := fanout._lease_targets(v_l, p_ids);
    v_n := cardinality(v_targets);
    IF v_n > 0 THEN
        -- Completion bits and sequence releases only where the topic has them.
        SELECT g.bit_no IS NOT NULL, t.sequence_ordering INTO v_ref, v_seq
        FROM fanout.consumer_group g JOIN fanout.topic t ON t.topic_id = g.topic_id
        WHERE g.group_id = v_l.group_id;
        IF v_ref THEN
            PERFORM fanout._complete_bits(v_l.group_id, v_l.msg_ids, v_l.msg_txids, true, v_targets);
        END IF;
        IF v_seq THEN
            PERFORM fanout._sequence_settled(v_l.group_id, v_targets);
        END IF;
        PERFORM fanout._lease_settle(v_l.lease_id, v_targets, false, true);
        PERFORM fanout._tally(v_l.group_id, v_l.slot_id, v_n, 0);
    END IF;
    RETURN v_n;
END
$fn$;
