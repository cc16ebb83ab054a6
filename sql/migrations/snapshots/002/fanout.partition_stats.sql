-- fanout.partition_stats(): one row per group of a partitioned topic,
-- summarizing view fanout.partitions for metrics (never one row per
-- partition): how many key partitions, how many have no owner, the
-- assignment's imbalance (most minus fewest partitions owned by one member;
-- 0 or 1 when even) and the largest lag of one partition (messages,
-- seconds). SECURITY DEFINER like every callable function; the view still
-- shows only topics the caller may consume (fanout._may checks the calling
-- role, fanout._caller). Runs without JIT: the view's row estimates made a
-- plain query over it JIT-compile on every scrape.
-- Tables: as fanout.partitions.
CREATE OR REPLACE FUNCTION fanout.partition_stats()
RETURNS TABLE(topic text, group_name text, partitions bigint, unowned bigint, imbalance bigint,
              max_lag_messages bigint, max_lag_seconds float8)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
SET jit = off
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH p AS (SELECT v.topic, v.group_name, v.owner, v.lag_messages, v.lag_seconds FROM fanout.partitions v),
         o AS (SELECT p.topic, p.group_name, p.owner, count(*) AS n FROM p WHERE p.owner IS NOT NULL
               GROUP BY 1, 2, 3)
    SELECT p.topic, p.group_name, count(*), count(*) FILTER (WHERE p.owner IS NULL),
           coalesce((SELECT max(o.n) - min(o.n) FROM o
                     WHERE o.topic = p.topic AND o.group_name IS NOT DISTINCT FROM p.group_name), 0),
           max(p.lag_messages), max(p.lag_seconds)
    FROM p GROUP BY p.topic, p.group_name ORDER BY p.topic, p.group_name NULLS FIRST;
END
$fn$;
