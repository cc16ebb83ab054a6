-- fanout._may(p_topic, p_privilege): whether the caller (fanout._caller) may
-- use topic p_topic (a name; it need not exist) with p_privilege 'publish',
-- 'consume', 'admin', or 'any' (some grant at all: what fanout.topics shows).
-- True when the caller is a superuser or a member of the owner of schema
-- fanout; otherwise it needs both the group role of the privilege
-- (fanout_producer, fanout_consumer, fanout_admin; 'any': one of them) and a
-- grant in fanout.topic_grant matching the topic for that privilege or
-- 'admin', held by a role it has the privileges of (pg_has_role USAGE).
-- Tables: fanout.topic_grant, pg_roles, pg_namespace.
CREATE OR REPLACE FUNCTION fanout._may(p_topic text, p_privilege text)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_caller oid := fanout._caller();
    v_role   boolean;
BEGIN
    IF v_caller IS NULL OR p_topic IS NULL THEN
        RETURN false;
    END IF;
    IF (SELECT r.rolsuper FROM pg_roles r WHERE r.oid = v_caller)
       OR pg_has_role(v_caller, (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'fanout'), 'USAGE') THEN
        RETURN true;
    END IF;
    v_role := CASE p_privilege
                  WHEN 'publish' THEN pg_has_role(v_caller, 'fanout_producer', 'USAGE')
                  WHEN 'consume' THEN pg_has_role(v_caller, 'fanout_consumer', 'USAGE')
                  WHEN 'admin' THEN pg_has_role(v_caller, 'fanout_admin', 'USAGE')
                  ELSE pg_has_role(v_caller, 'fanout_producer', 'USAGE')
                       OR pg_has_role(v_caller, 'fanout_consumer', 'USAGE')
              END;
    IF NOT v_role THEN
        RETURN false;
    END IF;
    RETURN EXISTS (
        SELECT 1 FROM fanout.topic_grant g JOIN pg_roles r ON r.oid = g.role
        WHERE (g.privilege = p_privilege OR g.privilege = 'admin' OR p_privilege = 'any')
          AND fanout._grant_matches(g.pattern, fanout._nfc(p_topic))
          AND pg_has_role(v_caller, r.oid, 'USAGE'));
END
$fn$;
