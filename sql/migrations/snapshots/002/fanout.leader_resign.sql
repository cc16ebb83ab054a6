-- fanout.leader_resign(p_leader_id, p_name): gives up leadership of role
-- p_name if p_leader_id holds it, so that a standby takes over at once.
-- Returns true when it was the leader.
-- Raises: PGQ21 (no admin grant on '%'). Tables: fanout.leader.
CREATE OR REPLACE FUNCTION fanout.leader_resign(p_leader_id text, p_name text DEFAULT 'pgq-scheduler')
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT fanout._authorize_all();  -- the sidecar's election concerns every tenant
    WITH gone AS (DELETE FROM fanout.leader l WHERE l.name = p_name AND l.leader_id = p_leader_id RETURNING 1)
    SELECT EXISTS (SELECT 1 FROM gone)
$fn$;
