-- fanout.leader_attempt(leader_id, ttl, name): elects or re-elects a
-- leader for role name (default 'pgq-scheduler'). The caller becomes (or
-- stays) leader when the role is free, expired, or already its own; the
-- lease then runs until now() + ttl on the database's clock.
-- Returns true when leader_id is the leader after the call.
-- Raises PGQ03 for NULL/empty ids or a TTL not in (0, 1 hour].
-- Tables: fanout.leader.
CREATE OR REPLACE FUNCTION fanout.leader_attempt(
    leader_id text, ttl interval, name text DEFAULT 'pgq-scheduler')
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    p_leader_id ALIAS FOR $1;
    p_ttl       ALIAS FOR $2;
    p_name      ALIAS FOR $3;
    v_leader    text;
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    PERFORM fanout._check_name('leader_id', p_leader_id);
    PERFORM fanout._check_name('name', p_name);
    IF p_ttl IS NULL OR p_ttl <= interval '0' OR p_ttl > interval '1 hour' THEN
        RAISE EXCEPTION 'ttl must be a positive interval of at most 1 hour, got %', coalesce(p_ttl::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    INSERT INTO fanout.leader AS l (name, leader_id, elected_at, expires_at)
    VALUES (p_name, p_leader_id, clock_timestamp(), clock_timestamp() + p_ttl)
    ON CONFLICT (name) DO UPDATE
    SET leader_id = excluded.leader_id,
        elected_at = CASE WHEN l.leader_id = excluded.leader_id THEN l.elected_at ELSE excluded.elected_at END,
        expires_at = excluded.expires_at
    WHERE l.leader_id = excluded.leader_id OR l.expires_at < clock_timestamp()
    RETURNING l.leader_id INTO v_leader;
    RETURN v_leader IS NOT DISTINCT FROM p_leader_id;
END
$fn$;
