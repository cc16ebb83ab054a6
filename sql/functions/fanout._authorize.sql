-- fanout._authorize(p_topic, p_privilege): raises unless the caller may use
-- topic p_topic with p_privilege (fanout._may). Entry points call it first,
-- before looking the topic up, so a caller without a grant cannot even learn
-- whether a topic exists. A NULL topic passes (the caller's own look-up
-- raises PGQ03).
-- When allowed, notes the caller in the transaction-local setting
-- fanout.xact_caller ('0' once two callers were allowed in the transaction,
-- after a SET ROLE): fanout._lock_lease skips its check for a slot row this
-- transaction wrote only for the one caller allowed in it. (A side effect:
-- VOLATILE, and here rather than in fanout._may, which views call.)
-- Raises: PGQ21 (no grant). Tables: as fanout._may.
CREATE OR REPLACE FUNCTION fanout._authorize(p_topic text, p_privilege text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_caller text;
BEGIN
    IF p_topic IS NULL THEN
        RETURN;
    END IF;
    IF fanout._may(p_topic, p_privilege) THEN
        v_caller := fanout._caller()::text;
        IF current_setting('fanout.xact_caller', true) IS DISTINCT FROM v_caller THEN
            PERFORM set_config('fanout.xact_caller',
                               CASE WHEN coalesce(current_setting('fanout.xact_caller', true), '') = ''
                                    THEN v_caller ELSE '0' END, true);
        END IF;
    ELSE
        RAISE EXCEPTION 'role % may not % topic %',
            coalesce((SELECT quote_ident(r.rolname) FROM pg_roles r WHERE r.oid = fanout._caller()), 'unknown'),
            p_privilege, quote_literal(p_topic)
            USING ERRCODE = 'PGQ21',
                  HINT = format('an admin grants it with fanout.grant_topic(%L, <role>, %L)', p_topic, p_privilege);
    END IF;
END
$fn$;
