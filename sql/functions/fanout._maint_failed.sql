-- fanout._maint_failed(p_func, p_topic_id, p_group_id, p_sqlstate, p_message):
-- records that one item (a topic, or a group) of a maintenance function
-- failed and was skipped, so that one bad item never stops maintenance of
-- the others. Always raises a WARNING (server log); writes a
-- 'maintenance_failed' row to fanout.event_log at most once an hour per
-- function and item, so a topic that keeps failing does not flood it.
-- Tables: fanout.topic, fanout.consumer_group, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout._maint_failed(
    p_func text, p_topic_id bigint, p_group_id bigint, p_sqlstate text, p_message text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_topic text := (SELECT t.topic FROM fanout.topic t WHERE t.topic_id = p_topic_id);
    v_group text := (SELECT g.group_name FROM fanout.consumer_group g WHERE g.group_id = p_group_id);
BEGIN
    RAISE WARNING 'fanout: % skipped topic % (group %): % %', p_func, coalesce(quote_literal(v_topic), p_topic_id::text),
        coalesce(quote_literal(v_group), p_group_id::text, '-'), p_sqlstate, p_message;
    IF NOT EXISTS (SELECT 1 FROM fanout.event_log e
                   WHERE e.at > clock_timestamp() - interval '1 hour' AND e.kind = 'maintenance_failed'
                     AND e.detail->>'function' = p_func
                     AND e.detail->>'topic_id' IS NOT DISTINCT FROM p_topic_id::text
                     AND e.detail->>'group_id' IS NOT DISTINCT FROM p_group_id::text) THEN
        INSERT INTO fanout.event_log (topic, group_name, kind, detail)
        VALUES (coalesce(v_topic, '#' || p_topic_id), v_group, 'maintenance_failed',
                jsonb_build_object('function', p_func, 'topic_id', p_topic_id, 'group_id', p_group_id,
                                   'sqlstate', p_sqlstate, 'error', left(p_message, 1000)));
    END IF;
END
$fn$;
