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
-- The work is fanout._ack's. Tables: fanout.lease, fanout.consumer_group, fanout.topic, fanout.seq_done
-- (sequence-ordered topics); reference
-- mode: fanout_data.m<topic_id>_done.
CREATE OR REPLACE FUNCTION fanout.ack(lease_id bigint, message_ids bigint[] DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_n int;
BEGIN
    SELECT a.o_n INTO v_n FROM fanout._ack($1, $2, false) a;
    RETURN v_n;
END
$fn$;
