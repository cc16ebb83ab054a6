-- View fanout.groups: one row per consumer group (group_name NULL for the
-- implicit group of a queue topic): status, members seen within the
-- heartbeat timeout, last sign of life, lag in messages and in seconds (age
-- of the oldest message not handed out yet, or waiting for its sequence's
-- turn), in-flight messages (under a
-- lease that runs) and the age of the oldest open lease, expired messages
-- (under a lease that ran out, not yet taken over: the next read hands them
-- out again), pending retries, messages waiting for their sequence's turn
-- (sequence-ordered topics), dead letters, messages lost to
-- retention, deliveries, and backfill progress (reference mode; offset mode
-- needs none): status, messages processed of total, rate per second, ETA;
-- last: dead_lettered_total, messages the group dead-lettered since it was
-- created (fanout.group_stat; dead_letters is what is left of them);
-- acked_total and nacked_total, messages its members acked and nacked since
-- it was created (fanout.group_tally; a nack that dead-letters counts as a
-- nack, and in dead_lettered_total); filter, the group's subscription
-- filter (NULL: none), and filtered_total, messages it passed over because
-- their headers did not contain it (fanout.group_filter, and on a
-- partitioned topic the sum over the key partitions, fanout.kpart.filtered;
-- docs/filters.md).
-- lag_messages is what the group still has to be handed: unread, expired
-- and waiting messages (a stuck aggregate or a dead consumer shows as lag);
-- the unread count uses index scans: O(lag), one statement per topic
-- (fanout._topic_group_view) for most groups.
-- Shows only the groups of topics the caller may consume: the rows come
-- from fanout._topic_group_view, which returns none for another topic
-- (fanout._may); the view is a security barrier, so no function of the
-- caller sees other rows.
-- Tables: fanout.consumer_group, fanout.topic, fanout.member, fanout.lease,
-- fanout.retry, fanout.seq_wait, fanout.dead_letter, fanout.bitmap_job, fanout.group_stat, fanout.group_tally,
-- fanout.group_filter, fanout.kpart,
-- fanout_data.*.
CREATE OR REPLACE VIEW fanout.groups WITH (security_barrier) AS
SELECT t.topic, g.group_name, g.status,
       (SELECT count(*) FROM fanout.member m
        WHERE m.group_id = g.group_id AND now() - m.last_seen < g.heartbeat_timeout)::int AS members,
       u.last_heartbeat,
       u.messages + coalesce(l.expired, 0) + w.waiting AS lag_messages,
       coalesce(extract(epoch FROM now() - u.oldest_published_at), 0)::float8 AS lag_seconds,
       now() - l.oldest_open AS oldest_unacked_age,
       coalesce(l.in_flight, 0) AS in_flight,
       coalesce(l.expired, 0) AS expired,
       (SELECT count(*) FROM fanout.retry r WHERE r.group_id = g.group_id) AS retry_pending,
       w.waiting,
       (SELECT count(*) FROM fanout.dead_letter d WHERE d.group_id = g.group_id) AS dead_letters,
       g.lost_messages, g.delivered,
       coalesce(b.status, 'not_needed') AS backfill_status,
       b.processed AS backfill_processed, b.total AS backfill_total,
       b.rate AS backfill_rate,
       CASE WHEN b.rate > 0 AND b.status = 'in_progress'
            THEN make_interval(secs => greatest(b.total - b.processed, 0) / b.rate) END AS backfill_eta,
       g.missed_heartbeats, g.heartbeat_timeout, g.dead_after_misses, g.start_position,
       g.created_at, g.status_changed_at, g.last_read_at, t.semantics, t.completion,
       coalesce((SELECT s.dead_lettered FROM fanout.group_stat s WHERE s.group_id = g.group_id), 0)
           AS dead_lettered_total,
       coalesce(k.acked, 0) AS acked_total, coalesce(k.nacked, 0) AS nacked_total,
       (SELECT gf.filter FROM fanout.group_filter gf WHERE gf.group_id = g.group_id) AS filter,
       -- Scalar subqueries, not a join: a join's row estimate multiplied the
       -- cost of every subquery above and made PostgreSQL JIT-compile the
       -- view's query (seconds).
       coalesce((SELECT gf.filtered
                        + CASE WHEN t.partitions IS NOT NULL
                               THEN coalesce((SELECT sum(kp.filtered) FROM fanout.kpart kp
                                              WHERE kp.group_id = g.group_id), 0)::bigint
                               ELSE 0 END
                 FROM fanout.group_filter gf WHERE gf.group_id = g.group_id), 0) AS filtered_total
FROM fanout.topic t
CROSS JOIN LATERAL fanout._topic_group_view(t.topic_id) u
JOIN fanout.consumer_group g ON g.group_id = u.group_id
LEFT JOIN LATERAL (SELECT sum(ol.open_count) FILTER (WHERE ol.expires_at > now())::bigint AS in_flight,
                          sum(ol.open_count) FILTER (WHERE ol.expires_at <= now())::bigint AS expired,
                          min(ol.created_at) AS oldest_open
                   FROM fanout.lease ol WHERE ol.group_id = g.group_id AND ol.open_count > 0) l ON true
CROSS JOIN LATERAL (SELECT count(*) AS waiting FROM fanout.seq_wait sw WHERE sw.group_id = g.group_id) w
LEFT JOIN LATERAL (SELECT j.status, j.processed, j.total,
                          (j.processed / nullif(extract(epoch FROM coalesce(j.finished_at, j.updated_at)
                                                        - j.started_at), 0))::float8 AS rate
                   FROM fanout.bitmap_job j WHERE j.group_id = g.group_id AND j.kind = 'backfill') b ON true
LEFT JOIN LATERAL (SELECT sum(c.acked)::bigint AS acked, sum(c.nacked)::bigint AS nacked
                   FROM fanout.group_tally c WHERE c.group_id = g.group_id) k ON true;
