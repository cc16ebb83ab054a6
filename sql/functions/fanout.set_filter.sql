-- fanout.set_filter(topic, group_name, filter): sets (or, with NULL or the
-- empty object, clears) a consumer group's subscription filter
-- (docs/filters.md): from the group's next read on, the messages its
-- position has not passed yet are judged by the new filter; pages already
-- handed out, retries and dead letters are not (a page read under the old
-- filter stays as it was). Same grant as fanout.subscribe (consume). On a
-- queue topic group_name is ignored: the filter is the topic's one group's,
-- and what does not match is passed over for every consumer.
-- Returns the filter now in effect (NULL: none). An event_log row records
-- the change.
-- Raises: PGQ01, PGQ03 (not a JSON object, over 4096 bytes, a
-- sequence-ordered topic: fanout._check_filter), PGQ13, PGQ14, PGQ16.
-- Tables: fanout.consumer_group (the group's row, locked: a read in progress
-- finishes first), fanout.group_filter, fanout.topic (has_filters, set by
-- the topic's first filter), fanout.event_log.
CREATE OR REPLACE FUNCTION fanout.set_filter(topic text, group_name text, filter jsonb)
RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_t fanout.topic;
    v_g fanout.consumer_group;
    v_f jsonb;
    v_old jsonb;
BEGIN
    v_t := fanout._enter_topic($1, 'consume');
    v_f := fanout._check_filter(v_t, $3);
    v_g := fanout._lock_group(v_t, $2, false);
    SELECT f.filter INTO v_old FROM fanout.group_filter f WHERE f.group_id = v_g.group_id;
    IF v_old IS DISTINCT FROM v_f THEN
        INSERT INTO fanout.group_filter AS f (group_id, filter) VALUES (v_g.group_id, v_f)
        ON CONFLICT (group_id) DO UPDATE SET filter = excluded.filter;
        IF v_f IS NOT NULL AND NOT v_t.has_filters THEN
            -- Reads of the topic look filters up from now on (never cleared:
            -- a read that looked the topic up before this commits reads its
            -- page without it).
            UPDATE fanout.topic t SET has_filters = true WHERE t.topic_id = v_t.topic_id AND NOT t.has_filters;
        END IF;
        INSERT INTO fanout.event_log (topic, group_name, kind, detail)
        VALUES (v_t.topic, v_g.group_name, 'filter_changed',
                jsonb_build_object('from', v_old, 'to', v_f));
    END IF;
    RETURN v_f;
END
$fn$;
