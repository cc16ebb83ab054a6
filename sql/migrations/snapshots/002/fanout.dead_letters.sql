-- View fanout.dead_letters: one row per dead-lettered message per group, with
-- a copy of the message and the error of its last attempt. group_name is NULL
-- on queue topics. Shows only topics the caller may consume (fanout._may).
-- Tables: fanout.dead_letter, fanout.consumer_group, fanout.topic.
CREATE OR REPLACE VIEW fanout.dead_letters WITH (security_barrier) AS
SELECT t.topic, g.group_name, d.message_id, d.payload, d.headers, d.attempts, d.last_error, d.dead_at,
       d.message_group, d.published_at
FROM fanout.dead_letter d
JOIN fanout.consumer_group g ON g.group_id = d.group_id
JOIN fanout.topic t ON t.topic_id = g.topic_id
WHERE fanout._may(t.topic, 'consume');
