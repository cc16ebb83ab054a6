-- fanout._sequence_dropped(p_topic_id, p_part): before cleanup drops a
-- partition of a sequence-ordered topic, records in fanout.seq_lost, for
-- every group, each sequence in it that the group has not acked yet (at or
-- past its aggregate's next_seq) and does not hold as its aggregate's
-- current message (fanout._release_lost settles that one): unread (counted
-- lost), or passed by a seek without being handed out. Its aggregate then
-- moves past it when its turn comes (fanout._sequence_advance) instead of
-- waiting for a message that is gone. Called by fanout._cleanup_partitions
-- with the partition locked.
-- Tables: fanout.seq_lost, fanout.consumer_group, fanout.seq_state, the partition.
CREATE OR REPLACE FUNCTION fanout._sequence_dropped(p_topic_id bigint, p_part fanout.partition)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    EXECUTE format(
        'INSERT INTO fanout.seq_lost (group_id, message_group, seq)
         SELECT g.group_id, m.message_group, m.seq
         FROM fanout_data.%I m
         CROSS JOIN fanout.consumer_group g
         LEFT JOIN fanout.seq_state s ON s.group_id = g.group_id AND s.message_group = m.message_group
         WHERE g.topic_id = $1 AND g.status <> ''cancelled'' AND m.seq IS NOT NULL
           AND m.seq >= coalesce(s.next_seq, 1) AND m.id IS DISTINCT FROM s.msg_id
         ON CONFLICT DO NOTHING', p_part.relname)
        USING p_topic_id;
END
$fn$;
