-- fanout._maint_call(p_func, p_arg, p_now): one call of one maintenance
-- operation as fanout.maint_operations() lists it (p_func one of
-- fanout.maint_functions(), anything else PGQ03), with lock_timeout 1
-- second: an operation that still meets lock_not_available is rolled back
-- alone (WARNING) and counts 0, so the round goes on and the next round does
-- it. The one step of fanout.run_maintenance (all in one transaction) and
-- fanout.maintain (a commit after each call).
-- Returns what the operation returned (call again while it is > 0).
-- Raises: PGQ21 (not an operator), PGQ03 (not a maintenance function).
-- Tables: as the operation.
CREATE OR REPLACE FUNCTION fanout._maint_call(p_func text, p_arg text, p_now timestamptz)
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
SET lock_timeout = '1s'
AS $fn$
DECLARE
    v_n int;
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    IF NOT EXISTS (SELECT 1 FROM fanout.maint_functions() f WHERE f.func = p_func) THEN
        RAISE EXCEPTION '% is not a maintenance function', coalesce(quote_literal(p_func), 'NULL')
            USING ERRCODE = 'PGQ03', HINT = 'fanout.maint_functions() lists them';
    END IF;
    BEGIN
        IF p_arg IS NULL THEN
            EXECUTE format('SELECT %s(p_now => $1)', p_func::regproc) INTO v_n USING p_now;
        ELSE
            EXECUTE format('SELECT %s($1, p_now => $2)', p_func::regproc) INTO v_n USING p_arg, p_now;
        END IF;
    EXCEPTION WHEN lock_not_available THEN
        RAISE WARNING 'fanout: maintenance: % waited too long for a lock and is left to the next round: %',
            p_func, SQLERRM;
        v_n := 0;
    END;
    RETURN coalesce(v_n, 0);
END
$fn$;
