-- fanout._check_grant_args(p_pattern, p_role, p_privilege): the checks of
-- fanout.grant_topic and fanout.revoke_topic: a valid pattern (a name, see
-- fanout._check_name), a role, a known privilege, and a caller allowed to
-- administer every topic the pattern can match: a superuser, the schema
-- owner, or a holder of fanout_admin with an admin grant whose pattern
-- covers p_pattern. Every check runs on the pattern in Unicode NFC (the
-- form fanout._check_name returns and the grant is stored and matched in):
-- a decomposed spelling of another tenant's prefix (E'acme\u0301.%') is
-- judged as the 'acmé.%' it becomes, never as the 'acme...' it was typed.
-- Callers store and delete the NFC form, which fanout._check_name returns.
-- Raises: PGQ03, PGQ04, PGQ21. Tables: fanout.topic_grant, pg_roles.
CREATE OR REPLACE FUNCTION fanout._check_grant_args(p_pattern text, p_role regrole, p_privilege text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_caller oid := fanout._caller();
    v_lit    text;
BEGIN
    p_pattern := fanout._check_name('pattern', p_pattern);  -- NFC, before any check
    IF p_role IS NULL THEN
        RAISE EXCEPTION 'role must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    IF p_privilege IS NULL OR p_privilege NOT IN ('publish', 'consume', 'admin') THEN
        RAISE EXCEPTION 'privilege must be publish, consume or admin, got %', coalesce(quote_literal(p_privilege), 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    -- The literal part of the pattern: every topic it matches starts with it.
    v_lit := CASE WHEN right(p_pattern, 1) = '%' THEN left(p_pattern, -1) ELSE p_pattern END;
    IF (SELECT r.rolsuper FROM pg_roles r WHERE r.oid = v_caller)
       OR pg_has_role(v_caller, (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'fanout'), 'USAGE') THEN
        RETURN;
    END IF;
    IF NOT (pg_has_role(v_caller, 'fanout_admin', 'USAGE')
            AND EXISTS (SELECT 1 FROM fanout.topic_grant g JOIN pg_roles r ON r.oid = g.role
                        WHERE g.privilege = 'admin' AND pg_has_role(v_caller, r.oid, 'USAGE')
                          AND CASE WHEN right(g.pattern, 1) = '%' THEN starts_with(v_lit, left(g.pattern, -1))
                                   ELSE g.pattern = p_pattern END)) THEN
        RAISE EXCEPTION 'role % may not administer topics matching %',
            coalesce((SELECT quote_ident(r.rolname) FROM pg_roles r WHERE r.oid = v_caller), 'unknown'),
            quote_literal(p_pattern)
            USING ERRCODE = 'PGQ21', HINT = 'grants need an admin grant covering the whole pattern';
    END IF;
END
$fn$;
