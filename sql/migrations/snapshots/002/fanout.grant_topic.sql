-- fanout.grant_topic(pattern, role, privilege): lets role (and every role
-- that has its privileges) use the topics pattern matches with privilege
-- 'publish', 'consume' or 'admin' (admin includes publish and consume). The
-- pattern is a topic name, or a prefix ending in '%' ('orders.%'; '%' alone
-- is every topic); see fanout._grant_matches. Topics need not exist yet.
-- The caller needs an admin grant whose pattern covers the whole pattern
-- (or to be a superuser or the schema owner). Idempotent.
-- Returns true when the grant is new, false when it existed.
-- Raises: PGQ03 (NULL role, unknown privilege), PGQ04 (bad pattern), PGQ21
-- (the caller may not administer that pattern).
-- Tables: fanout.topic_grant, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout.grant_topic(pattern text, role regrole, privilege text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_priv    text := lower(btrim($3));
    v_pattern text;
    v_n       int;
BEGIN
    -- Normalized once, here, before any check; checked, stored and logged
    -- in that one form (fanout._check_name, fanout._check_grant_args).
    v_pattern := fanout._check_name('pattern', $1);
    PERFORM fanout._check_grant_args(v_pattern, $2, v_priv);
    INSERT INTO fanout.topic_grant AS g (pattern, role, privilege, granted_by)
    VALUES (v_pattern, $2, v_priv, (SELECT r.rolname FROM pg_roles r WHERE r.oid = fanout._caller()))
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n > 0 THEN
        INSERT INTO fanout.event_log (topic, kind, detail)
        VALUES (v_pattern, 'topic_granted', jsonb_build_object('role', $2::text, 'privilege', v_priv));
    END IF;
    RETURN v_n > 0;
END
$fn$;
