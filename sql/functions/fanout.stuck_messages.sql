-- fanout.stuck_messages(older_than): messages that have been in flight
-- (under a lease, not settled) or waiting for a retry for longer than
-- older_than, per group, with their attempt and last error: the first place
-- to look when a consumer is wedged or a message keeps failing.
-- Only topics the caller may administer (fanout._may).
-- Raises PGQ03 for NULL or negative older_than.
-- Tables: fanout.lease, fanout.retry, fanout.consumer_group, fanout.topic.
CREATE OR REPLACE FUNCTION fanout.stuck_messages(older_than interval)
RETURNS TABLE(topic text, group_name text, message_id bigint, status text, attempt int,
              since timestamptz, consumer text, last_error text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    IF $1 IS NULL OR $1 < interval '0' THEN
        RAISE EXCEPTION 'older_than must be a non-negative interval, got %', coalesce($1::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    RETURN QUERY
    SELECT t.topic, g.group_name, u.id, 'in_flight'::text, u.att, l.created_at, l.consumer, NULL::text
    FROM fanout.lease l
    JOIN fanout.consumer_group g ON g.group_id = l.group_id
    JOIN fanout.topic t ON t.topic_id = g.topic_id
    CROSS JOIN LATERAL unnest(l.msg_ids, l.attempts) AS u(id, att)
    WHERE l.open_count > 0 AND now() - l.created_at > $1 AND fanout._may(t.topic, 'admin')
      AND u.id <> ALL (l.settled) AND u.id <> ALL (l.reclaimed)
    UNION ALL
    SELECT t.topic, g.group_name, r.message_id, 'retry', r.attempt, r.not_before, NULL, r.last_error
    FROM fanout.retry r
    JOIN fanout.consumer_group g ON g.group_id = r.group_id
    JOIN fanout.topic t ON t.topic_id = g.topic_id
    WHERE now() - r.not_before > $1 AND fanout._may(t.topic, 'admin')
    ORDER BY 6, 1, 2, 3;
END
$fn$;
