-- fanout.ack(lease_id, message_ids): marks messages of a lease as processed
-- (message_ids NULL = every message of the lease). Idempotent: acking again
-- changes nothing and returns 0 for those. Works inside the consumer's own
-- business transaction: if that rolls back, so does the ack. An ack after the
-- lease expired still succeeds as long as nobody else took the messages.
-- Returns how many messages this call settled.
-- In reference mode it also records the group as done with them (one row in
-- the topic's completion table, fanout._complete_bits; the messages are not
-- touched).
-- Raises: PGQ03, PGQ10 unknown lease, PGQ11 fenced (the lease expired and a
-- message was re-delivered to another consumer), PGQ12 message not in lease,
-- PGQ15 (reference mode: the group is paused).
-- Tables: fanout.lease, fanout.consumer_group, fanout.topic, fanout.seq_done
-- (sequence-ordered topics); reference
-- mode: fanout_data.m<topic_id>_done.
CREATE OR REPLACE FUNCTION fanout.ack(lease_id bigint, message_ids bigint[] DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_l       fanout.lease;
    v_targets bigint[];
    v_n       int;
    v_ref     boolean;
    v_seq     boolean;
BEGIN
    v_l := fanout._lock_lease($1);
    v_targets := fanout._lease_targets(v_l, $2);
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
    END IF;
    RETURN v_n;
END
$fn$;
