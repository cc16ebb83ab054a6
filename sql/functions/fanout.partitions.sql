-- View fanout.partitions: one row per (group, key partition) of every
-- partitioned topic: its owner (the member it is assigned to; NULL when free
-- or in explicit mode), generation (bumped at every ownership change),
-- lag in messages and seconds (age of the oldest message not handed out
-- yet; O(lag) index scans), in-flight messages (its unsettled page),
-- nacked messages waiting (retry_pending: the partition waits for them),
-- deliveries and when it was last served.
-- Shows only the groups of topics the caller may consume (fanout._may),
-- as a security barrier. Tables: fanout.consumer_group, fanout.topic,
-- fanout.kpart, fanout.lease, fanout.retry, fanout_data.*.
CREATE OR REPLACE VIEW fanout.partitions WITH (security_barrier) AS
SELECT t.topic, g.group_name, s.kpart AS partition, k.owner, coalesce(k.generation, 0) AS generation,
       u.messages AS lag_messages,
       coalesce(extract(epoch FROM now() - u.oldest_published_at), 0)::float8 AS lag_seconds,
       coalesce((SELECT l.open_count FROM fanout.lease l
                 WHERE l.slot_id = k.lease_id >> 32 AND l.lease_id = k.lease_id AND l.open_count > 0), 0) AS in_flight,
       (SELECT count(*) FROM fanout.retry r
        WHERE r.group_id = g.group_id AND r.kpart = s.kpart AND r.attempt > 0) AS retry_pending,
       coalesce(k.delivered, 0) AS delivered, k.owned_at, k.last_read_at, g.kpart_mode AS mode
FROM fanout.consumer_group g
JOIN fanout.topic t ON t.topic_id = g.topic_id AND t.partitions IS NOT NULL
CROSS JOIN LATERAL generate_series(0, t.partitions - 1) AS s(kpart)
LEFT JOIN fanout.kpart k ON k.group_id = g.group_id AND k.kpart = s.kpart
CROSS JOIN LATERAL fanout._kpart_view(g.group_id, s.kpart) u
WHERE fanout._may(t.topic, 'consume');
