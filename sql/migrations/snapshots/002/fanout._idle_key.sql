-- fanout._idle_key(p_topic_id, p_group_name): the key of a (topic, group) in
-- the session's idle hints (fanout._idle_hint): the topic id and a 64-bit
-- hash of the group name. (abs(hashtext()) overflowed for the one name in
-- 2^32 hashing to -2^31, e.g. 'grp-8RkJ8k', and every read of it raised
-- 22003.) A hash collision only costs a peek. Touches no table.
CREATE OR REPLACE FUNCTION fanout._idle_key(p_topic_id bigint, p_group_name text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    RETURN p_topic_id || ':' || hashtextextended(coalesce(p_group_name, ''), 0);
END
$fn$;
