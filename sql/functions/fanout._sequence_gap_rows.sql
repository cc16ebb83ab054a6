-- fanout._sequence_gap_rows(): the rows of the view fanout.sequence_gaps
-- (see there), for the topics the caller may consume (fanout._may), so
-- calling it directly reveals nothing the view hides. One pass over
-- fanout.seq_wait in primary-key order (window functions), then one
-- look-up of each aggregate's state for the waiters after a hole:
-- O(waiting messages). JIT off (compiling cost more than the query).
-- Tables: fanout.seq_wait, fanout.seq_state, fanout.consumer_group, fanout.topic.
CREATE OR REPLACE FUNCTION fanout._sequence_gap_rows()
RETURNS TABLE(topic text, group_name text, message_group text, missing_from bigint, missing_to bigint,
              waiting_messages bigint, oldest_waiting_age interval)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
SET jit = off
AS $fn$
SELECT t.topic, g.group_name, x.message_group,
       coalesce(x.prev, s.next_seq - CASE WHEN s.msg_id IS NULL THEN 1 ELSE 0 END) + 1 AS missing_from,
       x.seq - 1 AS missing_to, x.total - x.rn + 1 AS waiting_messages, now() - x.oldest AS oldest_waiting_age
FROM (SELECT w.group_id, w.message_group, w.seq, lag(w.seq) OVER a AS prev, row_number() OVER a AS rn,
             count(*) OVER p AS total, min(w.parked_at) OVER p AS oldest
      FROM fanout.seq_wait w
      WINDOW p AS (PARTITION BY w.group_id, w.message_group),
             a AS (PARTITION BY w.group_id, w.message_group ORDER BY w.seq)) x
JOIN fanout.seq_state s ON s.group_id = x.group_id AND s.message_group = x.message_group
JOIN fanout.consumer_group g ON g.group_id = x.group_id
JOIN fanout.topic t ON t.topic_id = g.topic_id
-- Only a waiter after a hole: the first of its aggregate, or one whose
-- predecessor among the waiters is not the previous sequence.
WHERE (x.prev IS NULL OR x.seq > x.prev + 1)
  AND x.seq > coalesce(x.prev, s.next_seq - CASE WHEN s.msg_id IS NULL THEN 1 ELSE 0 END) + 1
  AND fanout._may(t.topic, 'consume');
$fn$;
