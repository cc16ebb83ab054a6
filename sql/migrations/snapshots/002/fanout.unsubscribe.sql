-- fanout.unsubscribe(topic, group_name): active, paused or dead → cancelled (terminal): releases the group's leases and retries, stops pinning data; the name cannot be subscribed again.
-- Returns the new status.
-- Raises: PGQ01, PGQ13, PGQ14, PGQ15 (invalid transition; names the current
-- status), PGQ19 (queue topic). Tables: see fanout._transition.
CREATE OR REPLACE FUNCTION fanout.unsubscribe(topic text, group_name text)
RETURNS text
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$ SELECT fanout._transition($1, $2, ARRAY['active', 'paused', 'dead'], 'cancelled') $fn$;
