-- fanout._check_now(p_now): the clock argument of the maintenance and
-- monitoring functions (run_maintenance, maint_operations,
-- groups_near_timeout): NULL or ±infinity would make their arithmetic fail
-- with PostgreSQL's 22008 or silently select nothing.
-- Raises: PGQ03 (NULL or not finite). Touches no table.
CREATE OR REPLACE FUNCTION fanout._check_now(p_now timestamptz)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF p_now IS NULL OR NOT isfinite(p_now) THEN
        RAISE EXCEPTION 'now must be a finite timestamp, got %', coalesce(p_now::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
END
$fn$;
