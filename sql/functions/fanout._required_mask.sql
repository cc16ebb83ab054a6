-- fanout._required_mask(p_topic_id): the bitmap of a reference-mode topic's
-- groups that new messages require: active and paused groups.
-- Reads fanout.consumer_group.
CREATE OR REPLACE FUNCTION fanout._required_mask(p_topic_id bigint)
RETURNS bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT coalesce(bit_or(1::bigint << g.bit_no), 0)
    FROM fanout.consumer_group g
    WHERE g.topic_id = p_topic_id AND g.bit_no IS NOT NULL AND g.status IN ('active', 'paused')
$fn$;
