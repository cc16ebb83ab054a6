-- fanout._topic_view(p_topic_id): the size figures fanout.topics shows
-- (fanout._topic_stats) for a topic the caller holds some grant on; NULLs
-- for any other id, so calling it directly reveals nothing the view hides.
-- Tables: fanout.topic and as fanout._topic_stats.
CREATE OR REPLACE FUNCTION fanout._topic_view(
    p_topic_id bigint,
    OUT messages bigint, OUT oldest_message_age interval, OUT partitions int, OUT bytes bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF NOT fanout._may((SELECT t.topic FROM fanout.topic t WHERE t.topic_id = p_topic_id), 'any') THEN
        RETURN;
    END IF;
    SELECT s.messages, s.oldest_message_age, s.partitions, s.bytes
    INTO messages, oldest_message_age, partitions, bytes
    FROM fanout._topic_stats(p_topic_id) s;
END
$fn$;
