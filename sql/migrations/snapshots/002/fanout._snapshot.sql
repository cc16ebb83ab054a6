-- fanout._snapshot(): the current snapshot, with the caller's own
-- transaction counted as running. pg_current_snapshot() leaves the caller's
-- xid out of xip, so a window ending at it would treat the caller's own
-- uncommitted messages as committed: a reader that publishes in the same
-- transaction would be handed its own message before it commits (or one that
-- never commits), and the next window would start past it, losing it. With
-- the xid in xip, those messages are delivered by a later window once the
-- transaction has committed. Returns pg_snapshot; touches no table.
CREATE OR REPLACE FUNCTION fanout._snapshot()
RETURNS pg_snapshot
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_s pg_snapshot := pg_current_snapshot();
    v_x xid8 := pg_current_xact_id_if_assigned();
BEGIN
    -- An xid at or above xmax already counts as running.
    IF v_x IS NULL OR v_x >= pg_snapshot_xmax(v_s) THEN
        RETURN v_s;
    END IF;
    RETURN (least(pg_snapshot_xmin(v_s), v_x)::text || ':' || pg_snapshot_xmax(v_s)::text || ':'
            || array_to_string(ARRAY(SELECT x FROM (SELECT pg_snapshot_xip(v_s) AS x UNION SELECT v_x) u
                                     ORDER BY x), ','))::pg_snapshot;
END
$fn$;
