-- fanout._liveness(p_g): when the group last showed a sign of life: a
-- heartbeat, a read, an ack (member activity), its creation or a status
-- change. Reads fanout.member.
CREATE OR REPLACE FUNCTION fanout._liveness(p_g fanout.consumer_group)
RETURNS timestamptz
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT greatest(p_g.last_heartbeat, p_g.last_read_at, p_g.created_at, p_g.status_changed_at,
                    (SELECT max(m.last_seen) FROM fanout.member m WHERE m.group_id = p_g.group_id))
$fn$;
