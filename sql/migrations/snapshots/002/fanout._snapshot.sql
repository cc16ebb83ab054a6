-- fanout._snapshot(p_base, p_running): p_base (default: the current
-- snapshot), with the caller's own transaction, and the transactions in
-- p_running, counted as running.
-- pg_current_snapshot() leaves the caller's xid out of xip, so a window
-- ending at it would treat the caller's own uncommitted messages as
-- committed: a reader that publishes in the same transaction would be handed
-- its own message before it commits (or one that never commits), and the
-- next window would start past it, losing it. With the xid in xip, those
-- messages are delivered by a later window once the transaction has
-- committed. p_running (reference mode: transactions whose stamps wait to be
-- reconciled) holds ended transactions back the same way, so that no
-- window passes them before they are restamped. Returns pg_snapshot;
-- touches no table.
CREATE OR REPLACE FUNCTION fanout._snapshot(p_base pg_snapshot DEFAULT NULL, p_running xid8[] DEFAULT NULL)
RETURNS pg_snapshot
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_s   pg_snapshot := coalesce(p_base, pg_current_snapshot());
    v_add xid8[];
BEGIN
    -- An xid at or above xmax already counts as running.
    v_add := ARRAY(SELECT DISTINCT x
                   FROM unnest(coalesce(p_running, '{}') || pg_current_xact_id_if_assigned()) AS x
                   WHERE x IS NOT NULL AND x < pg_snapshot_xmax(v_s) AND pg_visible_in_snapshot(x, v_s));
    IF cardinality(v_add) = 0 THEN
        RETURN v_s;
    END IF;
    RETURN (least(pg_snapshot_xmin(v_s), (SELECT min(x) FROM unnest(v_add) AS x))::text || ':'
            || pg_snapshot_xmax(v_s)::text || ':'
            || array_to_string(ARRAY(SELECT x FROM (SELECT pg_snapshot_xip(v_s) AS x UNION SELECT unnest(v_add)) u
                                     ORDER BY x), ','))::pg_snapshot;
END
$fn$;
