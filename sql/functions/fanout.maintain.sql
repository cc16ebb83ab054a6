-- fanout.maintain(now): one full maintenance round, as fanout.run_maintenance
-- runs it (every operation fanout.maint_operations() lists, called again
-- while it returns > 0, at most 100 times each, through fanout._maint_call),
-- but with a COMMIT after each call: a lock an operation takes (dropping a
-- partition takes its topic's table in ACCESS EXCLUSIVE mode) is held for
-- that call only, not for the rest of the round, and what a call did stays
-- done if a later one fails. The form for pg_cron: CALL fanout.maintain().
-- A procedure, CALLed outside a transaction block (inside one PostgreSQL
-- raises 2D000 at the first COMMIT). A procedure that commits can neither
-- pin search_path nor be SECURITY DEFINER: it runs with its caller's rights,
-- names what it calls by schema, and every operation checks the caller
-- itself (an operator: PGQ21).
-- Raises: PGQ03 (now infinite), PGQ21, 2D000.
-- Tables: as the operations it runs.
CREATE OR REPLACE PROCEDURE fanout.maintain(now timestamptz DEFAULT NULL)
LANGUAGE plpgsql
AS $fn$
DECLARE
    v_now   timestamptz := coalesce($1, pg_catalog.now());
    v_funcs text[];
    v_args  text[];
    v_n     int;
BEGIN
    SELECT pg_catalog.array_agg(o.func ORDER BY o.ord), pg_catalog.array_agg(o.arg ORDER BY o.ord)
    INTO v_funcs, v_args
    FROM fanout.maint_operations(v_now) WITH ORDINALITY AS o(func, arg, ord);
    COMMIT;
    FOR i IN 1 .. coalesce(pg_catalog.cardinality(v_funcs), 0) LOOP
        FOR j IN 1 .. 100 LOOP
            v_n := fanout._maint_call(v_funcs[i], v_args[i], v_now);
            COMMIT;
            EXIT WHEN v_n = 0;
        END LOOP;
    END LOOP;
END
$fn$;
