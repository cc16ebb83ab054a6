-- fanout._caller(): the role whose topic grants pgq checks: the role set with
-- SET ROLE in this session, or else the login role (session_user). Inside a
-- SECURITY DEFINER function current_user is the function's owner, so it
-- cannot be used; the GUC "role" and session_user are not changed by
-- SECURITY DEFINER, and a session can only SET ROLE to a role it is a
-- member of, so neither can be forged. A wrapper function owned by another
-- role is therefore checked as the session that calls it, never as its owner.
-- Returns NULL if that role no longer exists. Reads pg_roles.
CREATE OR REPLACE FUNCTION fanout._caller()
RETURNS oid
LANGUAGE sql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT r.oid FROM pg_roles r
    WHERE r.rolname = CASE WHEN current_setting('role') = 'none' THEN session_user::text
                           ELSE current_setting('role') END
$fn$;
