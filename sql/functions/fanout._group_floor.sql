-- fanout._group_floor(p_g): the group's consumed floor as a txid: every
-- committed message with a lower txid has been handed out by the group's
-- stream. In phase 2 of a window that is the cursor, lowered to xmin of the
-- window's upper snapshot (transactions running at hi are delivered in the
-- next window even when their txid is below the cursor); in phase 1 it is
-- xmin of the lower snapshot. Leases and retries are checked separately.
-- Touches no table.
CREATE OR REPLACE FUNCTION fanout._group_floor(p_g fanout.consumer_group)
RETURNS xid8
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT CASE WHEN p_g.cur_txid >= pg_snapshot_xmax(p_g.win_lo)
                THEN least(p_g.cur_txid, pg_snapshot_xmin(p_g.win_hi))
                ELSE pg_snapshot_xmin(p_g.win_lo) END
$fn$;
