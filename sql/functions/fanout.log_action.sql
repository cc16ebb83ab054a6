-- fanout.log_action(topic, group_name, kind, count, detail): records an
-- administrative action taken outside SQL (the console's buttons) in
-- fanout.event_log, with the caller's role added to detail, so that a
-- sidecar running as a fanout_admin role (not the owner) can record what it
-- does. Call it in the action's transaction: both commit or neither.
-- kind: 1 to 64 characters [a-z0-9_]. Needs the admin grant on the topic.
-- Returns the event_log row's event_id.
-- Raises: PGQ03 (bad kind, NULL topic), PGQ21 (no admin grant).
-- Tables: fanout.event_log, fanout.topic_grant.
CREATE OR REPLACE FUNCTION fanout.log_action(
    topic text, group_name text, kind text, count bigint DEFAULT 0, detail jsonb DEFAULT '{}')
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_id bigint;
BEGIN
    IF $1 IS NULL THEN
        RAISE EXCEPTION 'topic must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    PERFORM fanout._authorize($1, 'admin');
    IF $3 IS NULL OR $3 !~ '^[a-z0-9_]{1,64}$' THEN
        RAISE EXCEPTION 'kind must be 1 to 64 characters of a-z, 0-9 and _, got %', coalesce(quote_literal($3), 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    INSERT INTO fanout.event_log AS e (topic, group_name, kind, count, detail)
    VALUES ($1, $2, $3, coalesce($4, 0),
            coalesce($5, '{}'::jsonb) || jsonb_build_object('role', (SELECT r.rolname FROM pg_roles r
                                                                    WHERE r.oid = fanout._caller())))
    RETURNING e.event_id INTO v_id;
    RETURN v_id;
END
$fn$;
