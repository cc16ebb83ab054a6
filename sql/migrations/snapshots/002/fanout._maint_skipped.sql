-- fanout._maint_skipped(p_func, p_topic_id, p_reason): records that
-- maintenance function p_func passed topic p_topic_id by because another
-- transaction held a lock it needed, so that it never waits for a tenant's
-- open transaction and still nobody misses that the topic is not being
-- maintained: one fanout.maint_skip row per function and topic (first_at
-- kept, last_at and skips updated), deleted by fanout._maint_lock_topic when the
-- function gets through the topic again. Raises a WARNING (server log) on
-- the first skip only. Tables: fanout.maint_skip, fanout.topic.
CREATE OR REPLACE FUNCTION fanout._maint_skipped(p_func text, p_topic_id bigint, p_reason text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_skips bigint;
BEGIN
    INSERT INTO fanout.maint_skip AS s (func, topic_id, topic, first_at, last_at, reason)
    VALUES (p_func, p_topic_id,
            coalesce((SELECT t.topic FROM fanout.topic t WHERE t.topic_id = p_topic_id), '#' || p_topic_id),
            clock_timestamp(), clock_timestamp(), left(p_reason, 1000))
    ON CONFLICT (func, topic_id) DO UPDATE
    SET last_at = excluded.last_at, skips = s.skips + 1, reason = excluded.reason
    RETURNING s.skips INTO v_skips;
    IF v_skips = 1 THEN
        RAISE WARNING 'fanout: % passed topic % by (tried again by a later call): %',
            p_func, p_topic_id, p_reason;
    END IF;
END
$fn$;
