-- fanout._may_see_grant(p_pattern, p_role): whether the caller may see a
-- grant in fanout.topic_grants: it has p_role's privileges, or it may
-- administer the pattern (fanout._may on the pattern's literal part with
-- 'admin' for exact names; for prefix patterns, an admin grant covering it).
-- Tables: fanout.topic_grant, pg_roles.
CREATE OR REPLACE FUNCTION fanout._may_see_grant(p_pattern text, p_role regrole)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_caller oid := fanout._caller();
BEGIN
    IF v_caller IS NULL THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles r WHERE r.oid = p_role) AND pg_has_role(v_caller, p_role::oid, 'USAGE') THEN
        RETURN true;
    END IF;
    BEGIN
        PERFORM fanout._check_grant_args(p_pattern, p_role, 'admin');
        RETURN true;
    EXCEPTION WHEN SQLSTATE 'PGQ21' THEN
        RETURN false;
    END;
END
$fn$;
