-- fanout._may(p_topic, p_privilege): whether the caller (fanout._caller) may
-- use topic p_topic (a name; it need not exist) with p_privilege 'publish',
-- 'consume', 'admin', or 'any' (some grant at all: what fanout.topics shows).
-- True when the caller is a superuser or a member of the owner of schema
-- fanout; otherwise it needs both the group role of the privilege
-- (fanout_producer, fanout_consumer, fanout_admin; 'any': one of them) and a
-- grant in fanout.topic_grant matching the topic for that privilege or
-- 'admin', held by a role it has the privileges of (pg_has_role USAGE).
-- No side effect (STABLE: views filter by it, and a STABLE function may be
-- called any number of times, or not at all, per row): the entry points'
-- note of the allowed caller is fanout._authorize's.
-- Tables: fanout.topic_grant, pg_namespace.
CREATE OR REPLACE FUNCTION fanout._may(p_topic text, p_privilege text)
RETURNS boolean
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_caller oid := fanout._caller();
    v_topic  text := fanout._nfc(p_topic);
    v_ok     boolean;
BEGIN
    IF v_caller IS NULL OR p_topic IS NULL THEN
        RETURN false;
    END IF;
    -- One query: superuser or schema owner (everything: pg_has_role is true
    -- for a superuser), else the group role of the privilege and a grant
    -- (the match of fanout._grant_matches, inline: this runs on every
    -- publish and read). No shared catalog (pg_roles is pg_authid): locks on
    -- shared relations never take the fast path, so every call queued on the
    -- same lock-manager partition (a storm of 150 readers spent a tenth of
    -- its time there).
    SELECT pg_has_role(v_caller, n.nspowner, 'USAGE')
               OR (CASE p_privilege
                       WHEN 'publish' THEN pg_has_role(v_caller, 'fanout_producer', 'USAGE')
                       WHEN 'consume' THEN pg_has_role(v_caller, 'fanout_consumer', 'USAGE')
                       WHEN 'admin' THEN pg_has_role(v_caller, 'fanout_admin', 'USAGE')
                       ELSE pg_has_role(v_caller, 'fanout_producer', 'USAGE')
                            OR pg_has_role(v_caller, 'fanout_consumer', 'USAGE')
                   END
                   AND EXISTS (
                       SELECT 1 FROM fanout.topic_grant g
                       WHERE (g.privilege = p_privilege OR g.privilege = 'admin' OR p_privilege = 'any')
                         AND CASE WHEN right(g.pattern, 1) = '%' THEN starts_with(v_topic, left(g.pattern, -1))
                                  ELSE v_topic = g.pattern END
                         AND pg_has_role(v_caller, g.role, 'USAGE')))  -- false for a dropped role
    INTO v_ok
    FROM pg_namespace n
    WHERE n.nspname = 'fanout';
    RETURN coalesce(v_ok, false);
END
$fn$;
