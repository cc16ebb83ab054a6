-- fanout._caller(): the role whose topic grants pgq checks: the role set with
-- SET ROLE in this session, or else the login role (session_user). Inside a
-- SECURITY DEFINER function current_user is the function's owner, so it
-- cannot be used; the GUC "role" and session_user are not changed by
-- SECURITY DEFINER, and a session can only SET ROLE to a role it is a
-- member of, so neither can be forged. A wrapper function owned by another
-- role is therefore checked as the session that calls it, never as its owner.
-- Returns NULL if that role no longer exists. Reads the role catalog
-- (through its cache: to_regrole; plpgsql, because a SQL function with SET is
-- planned again on every call, and this runs on every publish, read and ack).
CREATE OR REPLACE FUNCTION fanout._caller()
RETURNS oid
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    RETURN to_regrole(quote_ident(CASE WHEN current_setting('role') = 'none' THEN session_user::text
                                       ELSE current_setting('role') END))::oid;
END
$fn$;
