-- fanout._sequence_settled(p_group_id, p_ids): records that messages were
-- acked or dead-lettered, for those that are their aggregate's current
-- message on a sequence-ordered topic (fanout.seq_state.msg_id); the group's
-- next read applies it (fanout._sequence_advance). Insert-only, so an ack
-- inside a business transaction locks nothing readers need. On other topics
-- it finds nothing (one index probe). Returns nothing.
-- Tables: fanout.seq_state, fanout.seq_done.
CREATE OR REPLACE FUNCTION fanout._sequence_settled(p_group_id bigint, p_ids bigint[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    -- plpgsql, not sql: a SQL function's INSERT is planned on every call
    -- (PostgreSQL 15), which cost more than the rest of an ack.
    INSERT INTO fanout.seq_done (group_id, message_id)
    SELECT s.group_id, s.msg_id FROM fanout.seq_state s
    WHERE s.group_id = p_group_id AND s.msg_id = ANY (p_ids);
END
$fn$;
