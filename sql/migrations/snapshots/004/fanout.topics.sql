-- View fanout.topics: one row per topic with its settings, its LISTEN
-- channel, message count, oldest message age, segments and bytes
-- (max_groups and sequence_dropped_at last: fanout.alter_topic; then
-- notify_when: docs/wakeups.md; then segment_interval and segments, the
-- names of partition_interval and partitions, which stay as deprecated
-- aliases until the next minor release (docs/releases.md); then
-- has_filters (some group of the topic has a filter now: docs/filters.md),
-- priorities_dropped_at (alter_topic(priorities => false)) and
-- completion_switch_in_progress (docs/completion-switch.md)).
-- Shows only the topics the caller holds some grant on (fanout._may 'any').
-- Tables: fanout.topic, fanout.consumer_group, fanout.group_filter, fanout.partition, fanout_data.*.
CREATE OR REPLACE VIEW fanout.topics WITH (security_barrier) AS
SELECT t.topic, t.semantics, t.completion, t.retention, t.zero_subscription_retention,
       t.block_writes_without_subscriptions, t.max_retention, t.max_attempts, t.max_payload_bytes,
       t.zombie_ttl, t.notify, t.partition_interval, fanout.channel_name(t.topic_id) AS channel,
       (SELECT count(*) FROM fanout.consumer_group g
        WHERE g.topic_id = t.topic_id AND g.group_name IS NOT NULL AND g.status = 'active') AS active_groups,
       s.messages, s.oldest_message_age, s.partitions, s.bytes, t.dropped_unread, t.created_at, t.topic_id,
       t.dedupe_window, fanout._scheduled_count(t.topic_id) AS scheduled,
       t.prioritized, t.sequence_ordering, t.gap_alert_after, t.max_groups, t.sequence_dropped_at,
       t.notify_when, t.partition_interval AS segment_interval, s.partitions AS segments,
       EXISTS (SELECT 1 FROM fanout.consumer_group g JOIN fanout.group_filter f ON f.group_id = g.group_id
               WHERE g.topic_id = t.topic_id AND f.filter IS NOT NULL) AS has_filters,
       t.priorities_dropped_at,
       (t.completion_switch_id IS NOT NULL AND t.completion_switch_done_at IS NULL) AS completion_switch_in_progress
FROM fanout.topic t
CROSS JOIN LATERAL fanout._topic_view(t.topic_id) s
WHERE fanout._may(t.topic, 'any');
