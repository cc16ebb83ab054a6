-- fanout.remove_group(topic, group_name): administrative force-cancel of a
-- group in any status but cancelled: releases everything it holds (leases,
-- retries), it stops pinning data at once; its members learn it from
-- heartbeat() returning 'cancelled'. Returns true.
-- Raises: PGQ01, PGQ13, PGQ14, PGQ15 (already cancelled), PGQ19 (queue topic).
-- Tables: see fanout._transition.
CREATE OR REPLACE FUNCTION fanout.remove_group(topic text, group_name text)
RETURNS boolean
LANGUAGE sql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$ SELECT fanout._transition($1, $2, ARRAY['active', 'paused', 'dead'], 'cancelled') = 'cancelled' $fn$;
