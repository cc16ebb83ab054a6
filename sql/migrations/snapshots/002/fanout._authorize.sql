-- fanout._authorize(p_topic, p_privilege): raises unless the caller may use
-- topic p_topic with p_privilege (fanout._may). Entry points call it first,
-- before looking the topic up, so a caller without a grant cannot even learn
-- whether a topic exists. A NULL topic passes (the caller's own look-up
-- raises PGQ03).
-- Raises: PGQ21 (no grant). Tables: as fanout._may.
CREATE OR REPLACE FUNCTION fanout._authorize(p_topic text, p_privilege text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF p_topic IS NOT NULL AND NOT fanout._may(p_topic, p_privilege) THEN
        RAISE EXCEPTION 'role % may not % topic %',
            coalesce((SELECT quote_ident(r.rolname) FROM pg_roles r WHERE r.oid = fanout._caller()), 'unknown'),
            p_privilege, quote_literal(p_topic)
            USING ERRCODE = 'PGQ21',
                  HINT = format('an admin grants it with fanout.grant_topic(%L, <role>, %L)', p_topic, p_privilege);
    END IF;
END
$fn$;
