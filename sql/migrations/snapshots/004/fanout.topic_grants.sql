-- View fanout.topic_grants: the per-topic grants the caller may see: those
-- held by a role whose privileges it has, and those on patterns it may
-- administer. role_exists is false for a grant whose role was dropped (it
-- no longer matches anyone; revoke it). max_topics, max_groups and
-- max_bytes are the grant's quotas (fanout.set_quota; NULL: none).
-- Tables: fanout.topic_grant, pg_roles.
CREATE OR REPLACE VIEW fanout.topic_grants WITH (security_barrier) AS
SELECT g.pattern, g.role::text AS role, g.privilege, g.granted_by, g.granted_at,
       EXISTS (SELECT 1 FROM pg_roles r WHERE r.oid = g.role) AS role_exists,
       g.max_topics, g.max_groups, g.max_bytes
FROM fanout.topic_grant g
WHERE fanout._may_see_grant(g.pattern, g.role);
