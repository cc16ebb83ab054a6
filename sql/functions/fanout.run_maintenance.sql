-- fanout.run_maintenance(now): one full maintenance round for installs
-- without the pgq-scheduler sidecar (e.g. from pg_cron every minute): runs
-- every operation fanout.maint_operations() lists until it returns 0, at most
-- 100 times each. Returns the total work done.
-- Runs in one transaction: a partition it drops keeps its topic's table
-- locked (ACCESS EXCLUSIVE) until the whole round commits, so publishers and
-- readers of that topic wait for the rest of the round. CALL fanout.maintain()
-- commits after each call instead (the form for pg_cron).
-- Never blocks on another transaction's lock for long: each operation runs
-- with lock_timeout 1 second (fanout._maint_call); the
-- operations pass by a tenant's locked topic themselves (fanout.maint_skips)
-- and this is the bound for anything else. An operation that still meets
-- lock_not_available is rolled back alone (WARNING) and the round goes on
-- with the next one; the next round does it.
-- Raises: PGQ03 (now NULL or infinite), PGQ21.
-- Tables: as the operations it runs.
CREATE OR REPLACE FUNCTION fanout.run_maintenance(now timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    p_now   ALIAS FOR $1;
    r       record;
    v_n     int;
    v_total bigint := 0;
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    PERFORM fanout._check_now(p_now);
    FOR r IN SELECT * FROM fanout.maint_operations(p_now) AS o LOOP
        FOR i IN 1..100 LOOP
            v_n := fanout._maint_call(r.func, r.arg, p_now);
            v_total := v_total + v_n;
            EXIT WHEN v_n = 0;
        END LOOP;
    END LOOP;
    RETURN v_total;
END
$fn$;
