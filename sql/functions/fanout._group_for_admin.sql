-- fanout._group_for_admin(p_topic, p_group_name): the group an administrative
-- call names, locked FOR UPDATE, in any status. Queue topics: the implicit
-- group (p_group_name is ignored). Raises as fanout._topic and
-- fanout._lock_group. Tables: fanout.topic, fanout.consumer_group.
CREATE OR REPLACE FUNCTION fanout._group_for_admin(p_topic text, p_group_name text)
RETURNS fanout.consumer_group
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    PERFORM fanout._authorize(p_topic, 'admin');
    RETURN fanout._lock_group(fanout._topic(p_topic), p_group_name, false, true);
END
$fn$;
