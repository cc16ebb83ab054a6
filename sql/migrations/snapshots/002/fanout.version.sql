-- fanout.version(): the pgq version whose SQL is installed, as in the
-- repository's VERSION file when its migrations were frozen (scripts/release.sh
-- writes both; make verify-sql checks they agree). A development install
-- reports the version being prepared, with "-dev".
-- Returns text. Granted to the three roles (SECURITY DEFINER with the
-- pinned search_path, like every granted function). Tables: none.
CREATE OR REPLACE FUNCTION fanout.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
SELECT '0.1.0'::text
$fn$;
