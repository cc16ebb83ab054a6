-- fanout._lock_lease(p_lease_id): the lease row, locked FOR UPDATE (so that an
-- ack and a takeover by another reader are serialised). Records the lease's
-- consumer as alive (fanout._touch_member). The caller must be allowed to
-- consume the lease's topic (fanout._authorize), checked before the lock so
-- that another tenant cannot even block the lease.
-- Raises: PGQ03 NULL id, PGQ10 unknown lease, PGQ21 no consume grant on its
-- topic. Tables: fanout.lease, fanout.consumer_group, fanout.topic, fanout.member.
CREATE OR REPLACE FUNCTION fanout._lock_lease(p_lease_id bigint)
RETURNS fanout.lease
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_l fanout.lease;
BEGIN
    IF p_lease_id IS NULL THEN
        RAISE EXCEPTION 'lease_id must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    PERFORM fanout._authorize(t.topic, 'consume')
    FROM fanout.lease l
    JOIN fanout.consumer_group g ON g.group_id = l.group_id
    JOIN fanout.topic t ON t.topic_id = g.topic_id
    WHERE l.lease_id = p_lease_id;
    SELECT * INTO v_l FROM fanout.lease l WHERE l.lease_id = p_lease_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'lease % does not exist', p_lease_id
            USING ERRCODE = 'PGQ10', HINT = 'it was never issued, or it was settled long ago and cleaned up';
    END IF;
    IF v_l.consumer IS NOT NULL THEN
        -- Acks, nacks and extensions are signs of life too (throttled per member).
        PERFORM fanout._touch_member(v_l.group_id, v_l.consumer, clock_timestamp());
    END IF;
    RETURN v_l;
END
$fn$;
