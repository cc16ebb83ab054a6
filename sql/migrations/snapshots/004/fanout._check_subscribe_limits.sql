-- fanout._check_subscribe_limits(p_t, p_group_name, p_max_backfill,
-- p_heartbeat_timeout, p_dead_after_misses): the upper bounds of
-- fanout.subscribe (the lower bounds and NULLs are checked there):
-- heartbeat_timeout at most 7 days, dead_after_misses at most 1000,
-- max_backfill at most 1,000,000,000; and a new group only while its topic
-- has fewer than its max_groups groups (default 1000; any status; cancelled
-- ones count until subscription cleanup deletes them; an operator raises it
-- with fanout.alter_topic(max_groups => N)). Reference topics keep their own
-- limit of 64 (PGQ17).
-- Raises: PGQ03 (over a bound), PGQ22 (groups per topic).
-- Tables: fanout.consumer_group.
CREATE OR REPLACE FUNCTION fanout._check_subscribe_limits(
    p_t fanout.topic, p_group_name text, p_max_backfill bigint, p_heartbeat_timeout interval,
    p_dead_after_misses int)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    -- The topic row as it is now (p_t may be older than a raise).
    v_max int := coalesce((SELECT t.max_groups FROM fanout.topic t WHERE t.topic_id = p_t.topic_id), 1000);
BEGIN
    IF p_heartbeat_timeout > interval '7 days' THEN
        RAISE EXCEPTION 'heartbeat_timeout must be at most 7 days, got %', p_heartbeat_timeout USING ERRCODE = 'PGQ03';
    END IF;
    IF p_dead_after_misses > 1000 THEN
        RAISE EXCEPTION 'dead_after_misses must be at most 1000, got %', p_dead_after_misses USING ERRCODE = 'PGQ03';
    END IF;
    IF p_max_backfill > 1000000000 THEN
        RAISE EXCEPTION 'max_backfill must be at most 1000000000, got %', p_max_backfill USING ERRCODE = 'PGQ03';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM fanout.consumer_group g WHERE g.topic_id = p_t.topic_id AND g.group_name = p_group_name)
       AND (SELECT count(*) FROM (SELECT 1 FROM fanout.consumer_group g
                                  WHERE g.topic_id = p_t.topic_id LIMIT v_max) x) >= v_max THEN
        RAISE EXCEPTION 'topic % already has % consumer groups (its max_groups)', quote_literal(p_t.topic), v_max
            USING ERRCODE = 'PGQ22',
                  HINT = 'remove unused groups (fanout.remove_group; cancelled ones go after zombie_ttl), '
                         'or have an operator raise fanout.alter_topic(topic, max_groups => N)';
    END IF;
END
$fn$;
