-- fanout.maint_operations(now): the maintenance calls that are due, as
-- (func, arg) rows, so the pgq-scheduler sidecar (or pg_cron, or
-- fanout.run_maintenance) never hard-codes SQL. Call each as
-- SELECT func(p_now => now()) -- or func(arg, p_now => ...) when arg is not
-- NULL -- again while it returns > 0. Every listed function is idempotent,
-- bounded and takes its own lock row (fanout._try_lock). _cleanup_bookkeeping is listed,
-- among other reasons, while a pass of the dedupe sweep is under way or
-- due (an eighth of the shortest dedupe_window after the last began, at
-- least a minute, at most an hour) and a topic exists: whether any topic's
-- table of keys has rows is not known without opening each of them.
-- Reads fanout.topic, fanout.partition, fanout.lease, fanout.member,
-- fanout.event_log, fanout.consumer_group, fanout.bitmap_job, fanout.topic_state,
-- fanout.dedupe_sweep, fanout.seq_published, fanout.topic_grant,
-- fanout.topic_usage, fanout.quota_block.
-- Raises: PGQ03 (now NULL or infinite), PGQ21.
CREATE OR REPLACE FUNCTION fanout.maint_operations(now timestamptz DEFAULT now())
RETURNS TABLE(func text, arg text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT fanout._authorize_all();  -- acts on every tenant
    SELECT fanout._check_now($1);
    SELECT 'fanout._detect_dead_groups', NULL::text
    WHERE EXISTS (SELECT 1 FROM fanout.consumer_group g
                  WHERE g.status = 'active' AND g.group_name IS NOT NULL
                    AND $1 - greatest(g.last_heartbeat, g.last_read_at) > g.heartbeat_timeout)
    UNION ALL
    SELECT 'fanout._manage_partitions', NULL
    -- a topic without a partition ready ahead, one not yet ready (refresh
    -- pending), or an open partition due for rotation
    WHERE EXISTS (SELECT 1 FROM fanout.topic t
                  WHERE NOT EXISTS (SELECT 1 FROM fanout.partition p
                                    WHERE p.topic_id = t.topic_id AND p.closed_at IS NULL AND p.opened_at IS NULL))
       OR EXISTS (SELECT 1 FROM fanout.partition p JOIN fanout.topic t ON t.topic_id = p.topic_id
                  WHERE p.closed_at IS NULL
                    AND (p.opened_at IS NULL AND p.refresh_vxids IS NULL
                         OR $1 - p.opened_at >= t.partition_interval))
    UNION ALL
    SELECT 'fanout._cleanup_partitions', NULL
    WHERE EXISTS (SELECT 1 FROM fanout.partition p WHERE p.closed_at IS NOT NULL)
    UNION ALL
    SELECT 'fanout._cleanup_bookkeeping', NULL
    WHERE EXISTS (SELECT 1 FROM fanout.lease l WHERE l.open_count = 0 AND l.closed_at < $1 - interval '1 hour')
       OR EXISTS (SELECT 1 FROM fanout.member m WHERE m.last_seen < $1 - interval '7 days')
       OR EXISTS (SELECT 1 FROM fanout.event_log e WHERE e.at < $1 - interval '30 days')
       OR EXISTS (SELECT 1 FROM fanout.dedupe_sweep s
                  WHERE s.next_block IS NOT NULL
                     OR ((s.pass_started IS NULL OR s.pass_started > $1
                          OR s.pass_started <= $1 - (
                              SELECT greatest(interval '1 minute', least(min(t.dedupe_window) / 8, interval '1 hour'))
                              FROM fanout.topic t))
                         AND EXISTS (SELECT 1 FROM fanout.topic)))
       OR EXISTS (SELECT 1 FROM fanout.seq_published s JOIN fanout.topic t ON t.topic_id = s.topic_id
                  WHERE $1 - s.created_at > t.max_retention)
    UNION ALL
    SELECT 'fanout._bitmap_step', NULL
    WHERE EXISTS (SELECT 1 FROM fanout.bitmap_job j WHERE j.status IN ('not_started', 'in_progress'))
    UNION ALL
    SELECT 'fanout._refresh_topic_state', NULL
    WHERE EXISTS (SELECT 1 FROM fanout.topic_state)
    UNION ALL
    SELECT 'fanout._cleanup_groups', NULL
    WHERE EXISTS (SELECT 1 FROM fanout.consumer_group g WHERE g.status IN ('cancelled', 'dead'))
    UNION ALL
    SELECT 'fanout._sequence_gap_alerts', NULL
    WHERE EXISTS (SELECT 1 FROM fanout.seq_wait)
    UNION ALL
    SELECT 'fanout._measure_usage', NULL
    -- a bytes quota and a topic not measured in the last minute, or a
    -- block left by a quota since removed
    WHERE EXISTS (SELECT 1 FROM fanout.topic_grant g WHERE g.max_bytes IS NOT NULL)
          AND EXISTS (SELECT 1 FROM fanout.topic t LEFT JOIN fanout.topic_usage u ON u.topic_id = t.topic_id
                      WHERE u.measured_at IS NULL OR u.measured_at <= $1 - interval '1 minute' OR u.measured_at > $1)
       OR EXISTS (SELECT 1 FROM fanout.quota_block)
$fn$;
