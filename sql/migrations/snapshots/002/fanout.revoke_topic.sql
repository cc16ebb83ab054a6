-- fanout.revoke_topic(pattern, role, privilege): removes the grant that
-- fanout.grant_topic made with exactly these arguments. It does not narrow
-- other grants: revoking 'orders.%' leaves a grant on '%' in force.
-- Revoking the install's grants ('%' to fanout_producer, fanout_consumer,
-- fanout_admin) is how an operator turns tenant isolation on.
-- Returns true when a grant was removed, false when there was none.
-- Raises: as fanout.grant_topic. Tables: fanout.topic_grant, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout.revoke_topic(pattern text, role regrole, privilege text)
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
    DELETE FROM fanout.topic_grant g
    WHERE g.pattern = v_pattern AND g.role = $2 AND g.privilege = v_priv;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n > 0 THEN
        INSERT INTO fanout.event_log (topic, kind, detail)
        VALUES (v_pattern, 'topic_revoked', jsonb_build_object('role', $2::text, 'privilege', v_priv));
    END IF;
    RETURN v_n > 0;
END
$fn$;
