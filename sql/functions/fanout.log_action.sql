-- fanout.log_action(topic, group_name, kind, count, detail): records an
-- administrative action taken outside SQL (the console's buttons) in
-- fanout.event_log, with the caller's role added to detail, so that a
-- sidecar running as a fanout_admin role (not the owner) can record what it
-- does. Call it in the action's transaction: both commit or neither.
-- Bounded and validated like every other input: topic and group_name are
-- names (fanout._check_name: NFC, 1 to 512 characters, no control
-- characters), kind 1 to 64 characters [a-z0-9_], count 0 or more, detail a
-- JSON object of at most 8,192 bytes (as text) whose "actor", if any, is a
-- name too. Needs the admin grant on the topic.
-- What the audit row can be trusted for: "role" is the caller's database
-- role (fanout._caller: it cannot be forged, and overrides any "role" the
-- caller passed); everything else in detail is what the caller claims, and
-- an "actor" is marked so ("actor_verified": false): the console passes
-- whatever name its user typed.
-- Returns the event_log row's event_id.
-- Raises: PGQ03 (NULL topic, bad kind, negative count, detail not an object
-- or too large), PGQ04 (bad topic, group_name or actor), PGQ21 (no admin
-- grant).
-- Tables: fanout.event_log, fanout.topic_grant.
CREATE OR REPLACE FUNCTION fanout.log_action(
    topic text, group_name text, kind text, count bigint DEFAULT 0, detail jsonb DEFAULT '{}')
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_id     bigint;
    v_topic  text;
    v_group  text;
    v_detail jsonb := coalesce($5, '{}'::jsonb);
BEGIN
    v_topic := fanout._check_name('topic', $1);  -- NFC; PGQ03 when NULL
    PERFORM fanout._authorize(v_topic, 'admin');
    IF $2 IS NOT NULL THEN
        v_group := fanout._check_name('group_name', $2);
    END IF;
    IF $3 IS NULL OR $3 !~ '^[a-z0-9_]{1,64}$' THEN
        RAISE EXCEPTION 'kind must be 1 to 64 characters of a-z, 0-9 and _, got %',
            coalesce(quote_literal(left($3, 100)), 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF $4 < 0 THEN
        RAISE EXCEPTION 'count must not be negative, got %', $4 USING ERRCODE = 'PGQ03';
    END IF;
    IF jsonb_typeof(v_detail) <> 'object' THEN
        RAISE EXCEPTION 'detail must be a JSON object, got a JSON %', jsonb_typeof(v_detail) USING ERRCODE = 'PGQ03';
    END IF;
    IF octet_length(v_detail::text) > 8192 THEN
        RAISE EXCEPTION 'detail is % bytes as JSON text; the limit is 8192', octet_length(v_detail::text)
            USING ERRCODE = 'PGQ03';
    END IF;
    IF v_detail ? 'actor' THEN
        IF jsonb_typeof(v_detail->'actor') <> 'string' THEN
            RAISE EXCEPTION 'detail''s actor must be a JSON string, got a JSON %', jsonb_typeof(v_detail->'actor')
                USING ERRCODE = 'PGQ03';
        END IF;
        v_detail := v_detail || jsonb_build_object('actor', fanout._check_name('actor', v_detail->>'actor'),
                                                   'actor_verified', false);
    END IF;
    INSERT INTO fanout.event_log AS e (topic, group_name, kind, count, detail)
    VALUES (v_topic, v_group, $3, coalesce($4, 0),
            v_detail || jsonb_build_object('role', (SELECT r.rolname FROM pg_roles r WHERE r.oid = fanout._caller())))
    RETURNING e.event_id INTO v_id;
    RETURN v_id;
END
$fn$;
