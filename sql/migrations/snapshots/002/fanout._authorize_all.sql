-- fanout._authorize_all(): raises unless the caller may administer every
-- topic: a superuser, the owner of schema fanout, or a fanout_admin with an
-- admin grant on '%' (fanout._check_grant_args). Maintenance, leader
-- election and check_consistency act on every tenant (a maintenance call
-- with a p_now in the future would drop other tenants' data early, a
-- leader_attempt would stop the sidecar's maintenance), so a tenant's admin
-- grant is not enough for them.
-- Raises: PGQ21. Tables: fanout.topic_grant, pg_roles.
CREATE OR REPLACE FUNCTION fanout._authorize_all()
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    PERFORM fanout._check_grant_args('%', 'fanout_admin', 'admin');
END
$fn$;
