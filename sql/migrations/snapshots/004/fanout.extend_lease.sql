-- fanout.extend_lease(lease_id, extend_by): keeps a lease's messages for
-- longer: it now expires extend_by after its current expiry, or after now if
-- it has already expired (and nobody took its messages).
-- Returns the new expiry.
-- A lease lives at most 7 days in total (from its read): an extension
-- beyond that raises PGQ22 and changes nothing.
-- Raises: PGQ03 extend_by not positive or over 24 hours, PGQ10 (also: the
-- lease was settled and its slot reused by a later page), PGQ11 (a
-- message of the lease was re-delivered to another consumer), PGQ21 (no
-- consume grant on the lease's topic), PGQ22 (total lifetime over 7 days).
-- Tables: fanout.lease.
CREATE OR REPLACE FUNCTION fanout.extend_lease(lease_id bigint, extend_by interval)
RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_l   fanout.lease;
    v_exp timestamptz;
BEGIN
    IF $2 IS NULL OR $2 <= interval '0' OR $2 > interval '24 hours' THEN
        RAISE EXCEPTION 'extend_by must be a positive interval of at most 24 hours, got %', coalesce($2::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    v_l := fanout._lock_lease($1);
    IF cardinality(v_l.msg_ids) = 0 THEN
        -- An earlier page of a reused slot (fanout._lock_lease): nothing to keep.
        RAISE EXCEPTION 'lease % was settled and its slot holds a later page', $1
            USING ERRCODE = 'PGQ10', HINT = 'a settled lease needs no extension';
    END IF;
    PERFORM fanout._lease_targets(v_l, NULL);  -- fencing
    IF greatest(v_l.expires_at, clock_timestamp()) + $2 - v_l.created_at > interval '7 days' THEN
        RAISE EXCEPTION 'lease % would live longer than 7 days in total (read at %)', $1, v_l.created_at
            USING ERRCODE = 'PGQ22', HINT = 'settle it (ack or nack) and read the messages again';
    END IF;
    UPDATE fanout.lease l SET expires_at = greatest(l.expires_at, clock_timestamp()) + $2
    WHERE l.slot_id = v_l.slot_id
    RETURNING l.expires_at INTO v_exp;
    RETURN v_exp;
END
$fn$;
