-- fanout.pause(topic, group_name): active → paused; delivery stops, the position is kept (it pins data up to the topic's zombie_ttl).
-- Returns the new status.
-- Raises: PGQ01, PGQ13, PGQ14, PGQ15 (invalid transition; names the current
-- status), PGQ19 (queue topic). Tables: see fanout._transition.
CREATE OR REPLACE FUNCTION fanout.pause(topic text, group_name text)
RETURNS text
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$ SELECT fanout._transition($1, $2, ARRAY['active'], 'paused') $fn$;
