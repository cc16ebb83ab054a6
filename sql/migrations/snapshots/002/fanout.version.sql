-- fanout.version(): the pgq version whose SQL is installed, as in the
-- repository's VERSION file when its migrations were frozen (scripts/release.sh
-- writes both; make verify-sql checks they agree). A development install
-- reports the version being prepared, with "-dev".
-- Returns text. Tables: none.
CREATE OR REPLACE FUNCTION fanout.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
SELECT '0.1.0-dev'::text
$fn$;
