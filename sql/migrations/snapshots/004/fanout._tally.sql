-- fanout._tally(p_group_id, p_slot_id, p_acked, p_nacked): adds to the
-- group's ack and nack counters, in the row of the lease slot the messages
-- were settled under (fanout.group_tally): the caller holds that slot's
-- lease row, so no other member ever waits for this row. Called once per
-- ack (fanout._ack) and nack call that settled messages. plpgsql, not sql:
-- its statement is planned once per session.
-- Tables: fanout.group_tally.
CREATE OR REPLACE FUNCTION fanout._tally(p_group_id bigint, p_slot_id bigint, p_acked int, p_nacked int)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    INSERT INTO fanout.group_tally AS t (group_id, slot_id, acked, nacked)
    VALUES (p_group_id, p_slot_id, p_acked, p_nacked)
    ON CONFLICT (group_id, slot_id) DO UPDATE
    SET acked = t.acked + excluded.acked, nacked = t.nacked + excluded.nacked;
END
$fn$;
