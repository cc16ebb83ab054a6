-- fanout._lease_raw(p_id): the internal id (fanout.lease.lease_id) of the
-- lease id p_id a caller presents (fanout._lock_lease, read(..., ack =>)),
-- or NULL when it can be none: NULL or not positive. Normally the inverse
-- of fanout._lease_code. Release 0.1.0 handed out internal ids as they are:
-- such an id is still taken as it is while it is the current page of its
-- slot and that page was opened before fanout.lease_key.legacy_until (the
-- upgrade, and the calls in flight while it ran), so that a 0.1.0 client
-- acks across the upgrade; the check is skipped once no such page can live
-- (leases live 7 days at most). An internal id of a page opened after that
-- decodes to some unrelated id, almost surely of no slot: unknown (PGQ10),
-- so presenting internal ids tells nothing about later pages.
-- Tables: fanout.lease_key, fanout.lease.
CREATE OR REPLACE FUNCTION fanout._lease_raw(p_id bigint)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_until timestamptz;
BEGIN
    IF p_id IS NULL OR p_id < 1 THEN
        RETURN NULL;
    END IF;
    SELECT k.legacy_until INTO v_until FROM fanout.lease_key k;
    IF v_until > clock_timestamp() - interval '8 days'
       AND EXISTS (SELECT 1 FROM fanout.lease l
                   WHERE l.slot_id = p_id >> 32 AND l.lease_id = p_id AND l.created_at < v_until) THEN
        RETURN p_id;  -- release 0.1.0's form, of a page opened before the upgrade
    END IF;
    RETURN fanout._lease_code(p_id, false);
END
$fn$;
