-- fanout._lease_settle(p_lease_id, p_ids, p_taken, p_now): the one place
-- that records the end of messages of an open lease: settled by its holder
-- (ack, nack, dead letter: p_taken false; listed in lease.settled) or taken
-- away from it (taken over after expiry, released, dropped with their
-- partition: p_taken true; listed in lease.reclaimed, so a late ack of them
-- raises PGQ11). Keeps open_count (messages neither settled nor taken) and
-- closed_at (set when it reaches 0) in step with the arrays. With p_locked
-- the caller holds the lease's row lock and p_ids are open messages of it,
-- computed under that lock (ack, nack, read: no second look-up); without,
-- the row is locked here and only the messages of p_ids still open in it
-- are recorded (a concurrent ack may have settled some meanwhile).
-- A lease whose every message its holder settled (open_count 0, nothing
-- reclaimed) keeps settled empty: "all of msg_ids" needs no second copy of
-- the ids in the row (the common ack of a whole page; the row stays small
-- enough for HOT updates, see fanout.lease).
-- A lease is found by its slot (lease_id >> 32, fanout._lease_open) and
-- must still be the slot's page. NULL or empty p_ids change nothing.
-- Returns how many were recorded. Tables: fanout.lease.
CREATE OR REPLACE FUNCTION fanout._lease_settle(
    p_lease_id bigint, p_ids bigint[], p_taken boolean, p_locked boolean,
    p_now timestamptz DEFAULT clock_timestamp())
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_ids bigint[] := p_ids;
    v_n   int;
BEGIN
    IF NOT p_locked AND cardinality(p_ids) > 0 THEN
        SELECT ARRAY(SELECT x FROM unnest(p_ids) AS x WHERE x <> ALL (l.settled) AND x <> ALL (l.reclaimed))
        INTO v_ids
        FROM fanout.lease l
        WHERE l.slot_id = p_lease_id >> 32 AND l.lease_id = p_lease_id AND l.open_count > 0
        FOR UPDATE;
    END IF;
    v_n := coalesce(cardinality(v_ids), 0);
    IF v_n = 0 THEN
        RETURN 0;
    END IF;
    IF p_taken THEN
        UPDATE fanout.lease l
        SET reclaimed = l.reclaimed || v_ids, open_count = l.open_count - v_n,
            closed_at = CASE WHEN l.open_count = v_n THEN p_now END
        WHERE l.slot_id = p_lease_id >> 32 AND l.lease_id = p_lease_id;
    ELSE
        UPDATE fanout.lease l
        SET settled = CASE WHEN l.open_count = v_n AND l.reclaimed = '{}' THEN '{}' ELSE l.settled || v_ids END,
            open_count = l.open_count - v_n,
            closed_at = CASE WHEN l.open_count = v_n THEN p_now END
        WHERE l.slot_id = p_lease_id >> 32 AND l.lease_id = p_lease_id;
    END IF;
    RETURN v_n;
END
$fn$;
