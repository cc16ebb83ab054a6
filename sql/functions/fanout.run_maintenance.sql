-- fanout.run_maintenance(now): one full maintenance round for installs
-- without the pgq-scheduler sidecar (e.g. from pg_cron every minute): runs
-- every operation fanout.maint_operations() lists until it returns 0, at most
-- 100 times each. Returns the total work done.
-- Tables: as the operations it runs.
CREATE OR REPLACE FUNCTION fanout.run_maintenance(now timestamptz DEFAULT now())
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    p_now   ALIAS FOR $1;
    r       record;
    v_fn    regproc;
    v_n     int;
    v_total bigint := 0;
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    FOR r IN SELECT * FROM fanout.maint_operations(p_now) AS o LOOP
        v_fn := r.func::regproc;
        FOR i IN 1..100 LOOP
            IF r.arg IS NULL THEN
                EXECUTE format('SELECT %s(p_now => $1)', v_fn) INTO v_n USING p_now;
            ELSE
                EXECUTE format('SELECT %s($1, p_now => $2)', v_fn) INTO v_n USING r.arg, p_now;
            END IF;
            v_total := v_total + v_n;
            EXIT WHEN v_n = 0;
        END LOOP;
    END LOOP;
    RETURN v_total;
END
$fn$;
