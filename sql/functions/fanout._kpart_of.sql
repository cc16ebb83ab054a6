-- fanout._kpart_of(p_key, p_partitions): the key partition of a message_group
-- on a topic with p_partitions partitions, the documented, stable hash
-- (README, "Ordering"): the first 4 bytes of md5(key) (the key's bytes in the
-- database encoding, UTF-8) read as an unsigned big-endian integer, modulo
-- p_partitions. NULL for a NULL key (such messages are spread at random by
-- the topic's insert functions). Touches no table.
CREATE OR REPLACE FUNCTION fanout._kpart_of(p_key text, p_partitions int)
RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT (('x' || substr(md5(p_key), 1, 8))::bit(32)::bigint % p_partitions)::int
$fn$;
