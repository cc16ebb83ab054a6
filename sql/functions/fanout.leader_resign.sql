-- fanout.leader_resign(leader_id, name): gives up leadership of role
-- name if leader_id holds it, so that a standby takes over at once.
-- Returns true when it was the leader.
-- Raises: PGQ21 (no admin grant on '%'). Tables: fanout.leader.
CREATE OR REPLACE FUNCTION fanout.leader_resign(leader_id text, name text DEFAULT 'pgq-scheduler')
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT fanout._authorize_all();  -- the sidecar's election concerns every tenant
    WITH gone AS (DELETE FROM fanout.leader l WHERE l.name = $2 AND l.leader_id = $1 RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone)
$fn$;
