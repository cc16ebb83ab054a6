-- View fanout.sequence_gaps: per consumer group and aggregate of a
-- sequence-ordered topic, each range of sequences that is missing while
-- later sequences wait for it (fanout.seq_wait): missing_from..missing_to,
-- waiting_messages (messages waiting behind this gap, i.e. with a higher
-- sequence) and oldest_waiting_age (how long the aggregate's oldest waiting
-- message has waited). A sequence that was handed out and not acked yet is
-- not missing. Computed from the waiting messages and their aggregates'
-- state only: O(waiting messages), whatever the sequence numbers.
-- Shows only the groups of topics the caller may consume (fanout._may).
-- Tables: fanout.seq_wait, fanout.seq_state, fanout.consumer_group, fanout.topic.
CREATE OR REPLACE VIEW fanout.sequence_gaps WITH (security_barrier) AS
SELECT t.topic, g.group_name, x.message_group, x.missing_from, x.missing_to,
       x.waiting_messages, now() - x.oldest_parked AS oldest_waiting_age
FROM (SELECT w.group_id, w.message_group,
             coalesce(lag(w.seq) OVER a,
                      (SELECT s.next_seq - CASE WHEN s.msg_id IS NULL THEN 1 ELSE 0 END
                       FROM fanout.seq_state s
                       WHERE s.group_id = w.group_id AND s.message_group = w.message_group)) + 1 AS missing_from,
             w.seq - 1 AS missing_to,
             count(*) OVER p - row_number() OVER a + 1 AS waiting_messages,
             min(w.parked_at) OVER p AS oldest_parked
      FROM fanout.seq_wait w
      WINDOW p AS (PARTITION BY w.group_id, w.message_group),
             a AS (PARTITION BY w.group_id, w.message_group ORDER BY w.seq)) x
JOIN fanout.consumer_group g ON g.group_id = x.group_id
JOIN fanout.topic t ON t.topic_id = g.topic_id
WHERE x.missing_from <= x.missing_to AND fanout._may(t.topic, 'consume');
