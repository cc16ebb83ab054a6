-- fanout.wait_end(topic, waiter): ends the wait fanout.wait_begin announced
-- (the consumer woke up and found messages): publishers stop sending
-- NOTIFYs for it. Also
-- removes the topic's announcements that expired (their consumers died or
-- lost their connection). Nothing happens for an unknown topic or waiter.
-- Raises: PGQ21 (no consume grant). Tables: fanout.topic, fanout.waiter.
CREATE OR REPLACE FUNCTION fanout.wait_end(topic text, waiter text)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    PERFORM fanout._authorize($1, 'consume');
    DELETE FROM fanout.waiter w
    USING fanout.topic t
    WHERE t.topic = fanout._nfc($1) AND w.topic_id = t.topic_id
      AND (w.waiter = $2 OR w.until < clock_timestamp());
END
$fn$;
