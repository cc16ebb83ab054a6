-- fanout.resume(topic, group_name): paused → active; delivery continues from the kept position.
-- Returns the new status.
-- Raises: PGQ01, PGQ13, PGQ14, PGQ15 (invalid transition; names the current
-- status), PGQ19 (queue topic). Tables: see fanout._transition.
CREATE OR REPLACE FUNCTION fanout.resume(topic text, group_name text)
RETURNS text
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$ SELECT fanout._transition($1, $2, ARRAY['paused'], 'active') $fn$;
