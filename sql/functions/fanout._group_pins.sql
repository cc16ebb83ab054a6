-- fanout._group_pins(p_g, p_t, p_now): whether the group holds back storage.
-- A queue's implicit group always does. A pubsub group does while it is
-- active or paused and its cursor moved (a read), it was created, or its
-- status changed within the topic's zombie_ttl: an idle cursor stops pinning
-- (zombie protection). Dead and cancelled groups never pin.
-- Touches no table.
CREATE OR REPLACE FUNCTION fanout._group_pins(p_g fanout.consumer_group, p_t fanout.topic, p_now timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT p_g.group_name IS NULL
        OR (p_g.status IN ('active', 'paused')
            AND p_now - greatest(p_g.last_read_at, p_g.status_changed_at, p_g.created_at) < p_t.zombie_ttl)
$fn$;
