-- fanout.groups_near_timeout(now): active pubsub groups that have gone more than
-- half a heartbeat_timeout without a sign of life, with how many heartbeats
-- they missed and how long until detection declares them dead. Only groups
-- of topics the caller may administer (fanout._may).
-- Raises: PGQ03 (now NULL or infinite).
-- Tables: fanout.consumer_group, fanout.topic, fanout.member.
CREATE OR REPLACE FUNCTION fanout.groups_near_timeout(now timestamptz DEFAULT now())
RETURNS TABLE(topic text, group_name text, status text, last_heartbeat timestamptz,
              missed_heartbeats int, dead_after_misses int, dead_in interval)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT fanout._check_now($1);
    SELECT t.topic, g.group_name, g.status, fanout._liveness(g), g.missed_heartbeats, g.dead_after_misses,
           greatest(interval '0', g.heartbeat_timeout * g.dead_after_misses - ($1 - fanout._liveness(g)))
    FROM fanout.consumer_group g JOIN fanout.topic t ON t.topic_id = g.topic_id
    WHERE g.status = 'active' AND g.group_name IS NOT NULL
      AND $1 - fanout._liveness(g) > g.heartbeat_timeout / 2
      AND fanout._may(t.topic, 'admin')
    ORDER BY 7, 1, 2
$fn$;
