-- fanout._grant_ok(p_caller, p_topic, p_privilege): the grant check of
-- fanout._may and fanout._enter_topic, the one place it is written: whether
-- role p_caller (fanout._caller) may use topic p_topic (a name in NFC; it
-- need not exist) with p_privilege 'publish', 'consume', 'admin', or 'any'
-- (some grant at all). True when the caller is a superuser or a member of
-- the owner of schema fanout; otherwise it needs both the group role of the
-- privilege (fanout_producer, fanout_consumer, fanout_admin; 'any': one of
-- them) and a grant in fanout.topic_grant matching the topic for that
-- privilege or 'admin', held by a role it has the privileges of
-- (pg_has_role USAGE; false for a dropped role). NULL when p_caller or
-- p_topic is NULL. One query (the match of fanout._grant_matches, inline:
-- this runs on every publish and read). No shared catalog (pg_roles is
-- pg_authid): locks on shared relations never take the fast path, so every
-- call queued on the same lock-manager partition (a storm of 150 readers
-- spent a tenth of its time there). No side effect.
-- Tables: fanout.topic_grant, pg_namespace.
CREATE OR REPLACE FUNCTION fanout._grant_ok(p_caller oid, p_topic text, p_privilege text)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    RETURN (SELECT pg_has_role(p_caller, n.nspowner, 'USAGE')
                   OR (CASE p_privilege
                           WHEN 'publish' THEN pg_has_role(p_caller, 'fanout_producer', 'USAGE')
                           WHEN 'consume' THEN pg_has_role(p_caller, 'fanout_consumer', 'USAGE')
                           WHEN 'admin' THEN pg_has_role(p_caller, 'fanout_admin', 'USAGE')
                           ELSE pg_has_role(p_caller, 'fanout_producer', 'USAGE')
                                OR pg_has_role(p_caller, 'fanout_consumer', 'USAGE')
                       END
                       AND EXISTS (
                           SELECT 1 FROM fanout.topic_grant g
                           WHERE (g.privilege = p_privilege OR g.privilege = 'admin' OR p_privilege = 'any')
                             AND CASE WHEN right(g.pattern, 1) = '%' THEN starts_with(p_topic, left(g.pattern, -1))
                                      ELSE p_topic = g.pattern END
                             AND pg_has_role(p_caller, g.role, 'USAGE')))
            FROM pg_namespace n
            WHERE n.nspname = 'fanout' AND p_topic IS NOT NULL);
END
$fn$;
