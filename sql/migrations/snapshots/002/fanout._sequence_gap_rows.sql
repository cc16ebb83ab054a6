-- fanout._sequence_gap_rows(): the rows of the view fanout.sequence_gaps
-- (see there), for the topics the caller may consume (fanout._may), so
-- calling it directly reveals nothing the view hides. One pass over
-- fanout.seq_wait in primary-key order that sums up each aggregate's
-- waiters (lowest and highest sequence, count, oldest), joined to its
-- state: the gap before the first waiter comes from that row alone. Only
-- an aggregate whose waiters are not contiguous (highest - lowest + 1 >
-- count) is read again, row by row, for the gaps between its waiters.
-- O(waiting messages); a window over every waiter cost twice as much at a
-- million. JIT off (compiling cost more than the query).
-- Tables: fanout.seq_wait, fanout.seq_state, fanout.consumer_group, fanout.topic.
CREATE OR REPLACE FUNCTION fanout._sequence_gap_rows()
RETURNS TABLE(topic text, group_name text, message_group text, missing_from bigint, missing_to bigint,
              waiting_messages bigint, oldest_waiting_age interval)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
SET jit = off
AS $fn$
WITH a AS (
    SELECT w.group_id, w.message_group, min(w.seq) AS lo, max(w.seq) AS hi, count(*) AS n,
           min(w.parked_at) AS oldest
    FROM fanout.seq_wait w
    GROUP BY w.group_id, w.message_group),
j AS (
    SELECT t.topic, g.group_name, a.group_id, a.message_group, a.lo, a.hi, a.n, a.oldest,
           s.next_seq - CASE WHEN s.msg_id IS NULL THEN 1 ELSE 0 END AS done_to
    FROM a
    JOIN fanout.seq_state s ON s.group_id = a.group_id AND s.message_group = a.message_group
    JOIN fanout.consumer_group g ON g.group_id = a.group_id
    JOIN fanout.topic t ON t.topic_id = g.topic_id
    WHERE fanout._may(t.topic, 'consume'))
SELECT j.topic, j.group_name, j.message_group, j.done_to + 1, j.lo - 1, j.n, now() - j.oldest
FROM j WHERE j.lo > j.done_to + 1
UNION ALL
SELECT j.topic, j.group_name, j.message_group, z.prev + 1, z.seq - 1, j.n - z.rn + 1, now() - j.oldest
FROM j
CROSS JOIN LATERAL (
    SELECT w.seq, lag(w.seq) OVER (ORDER BY w.seq) AS prev, row_number() OVER (ORDER BY w.seq) AS rn
    FROM fanout.seq_wait w
    WHERE w.group_id = j.group_id AND w.message_group = j.message_group) z
WHERE j.hi - j.lo + 1 > j.n AND z.seq > z.prev + 1;
$fn$;
