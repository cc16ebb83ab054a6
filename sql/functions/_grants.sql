-- _grants.sql: privileges, applied after every install of this package.
-- Everything users call is SECURITY DEFINER with a pinned search_path;
-- nobody gets EXECUTE by default (PUBLIC is revoked), and no role but the
-- owner touches a table. Role membership: fanout_admin has both other roles.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA fanout FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA fanout FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA fanout_data FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA fanout_data FROM PUBLIC;

GRANT fanout_producer, fanout_consumer TO fanout_admin;

GRANT EXECUTE ON FUNCTION
    fanout.publish(text, jsonb, jsonb, text, boolean, text, timestamptz, interval, int, bigint),
    fanout.publish_batch(text, jsonb[], jsonb[], text[], boolean, text[], timestamptz, interval, int, bigint[]),
    fanout.channel_name(bigint),
    fanout.partition_of(text, text),
    fanout.capture_table(regclass, text, text[], text[], text, int),
    fanout.uncapture_table(regclass)
TO fanout_producer;

GRANT EXECUTE ON FUNCTION
    fanout.read(text, text, text, int, interval, bigint, int, bigint),
    fanout.capture_rows(text, bigint, text, bigint, int),
    fanout.partition_of(text, text),
    fanout.ack(bigint, bigint[]),
    fanout.nack(bigint, bigint[], interval, text),
    fanout.extend_lease(bigint, interval),
    fanout.heartbeat(text, text, text),
    fanout.subscribe(text, text, text, timestamptz, bigint, bigint, interval, int, int, text, jsonb),
    fanout.set_filter(text, text, jsonb),
    fanout.channel_name(bigint),
    fanout.wait_begin(text, text, interval),
    fanout.wait_end(text, text)
TO fanout_consumer;

GRANT EXECUTE ON FUNCTION
    fanout.create_topic(text, text, text, interval, interval, boolean, interval, int, int, interval, boolean, interval, interval,
                        boolean, interval, int, boolean, text, interval),
    fanout.alter_topic(text, interval, interval, boolean, interval, int, int, interval, boolean, interval, interval, interval,
                       int, boolean, int, boolean, text, boolean, text, interval),
    fanout.drop_topic(text, boolean),
    fanout.replay_dead_letters(text, text, bigint[]),
    fanout.purge_dead_letters(text, text, interval),
    fanout.maint_operations(timestamptz),
    fanout.maint_functions(),
    fanout.maint_skips(),
    fanout.run_maintenance(timestamptz),
    fanout._maint_call(text, text, timestamptz),
    fanout._manage_partitions(timestamptz),
    fanout._cleanup_partitions(timestamptz),
    fanout._cleanup_bookkeeping(timestamptz),
    fanout.leader_attempt(text, interval, text),
    fanout.leader_resign(text, text),
    fanout.seek(text, text, text, timestamptz, bigint),
    fanout.pause(text, text),
    fanout.resume(text, text),
    fanout.unsubscribe(text, text),
    fanout.message_status(text, bigint),
    fanout.remove_group(text, text),
    fanout.resurrect_group(text, text, boolean),
    fanout.groups_near_timeout(timestamptz),
    fanout.stuck_messages(interval),
    fanout.check_consistency(),
    fanout._detect_dead_groups(timestamptz),
    fanout._cleanup_groups(timestamptz),
    fanout._sequence_gap_alerts(timestamptz),
    fanout._measure_usage(timestamptz),
    fanout.set_quota(text, regrole, text, bigint, bigint, bigint),
    fanout._bitmap_step(timestamptz, bigint),
    fanout._refresh_topic_state(timestamptz),
    fanout.cancel_backfill(text, text),
    fanout.restart_backfill(text, text),
    fanout.force_complete_orphaned(text, interval),
    fanout.replay(text, text, bigint[]),
    fanout.log_action(text, text, text, bigint, jsonb)
TO fanout_admin;

GRANT EXECUTE ON FUNCTION
    fanout.grant_topic(text, regrole, text),
    fanout.revoke_topic(text, regrole, text)
TO fanout_admin;

-- Functions the views call run with the caller's EXECUTE rights. Each checks
-- the caller's topic grants itself (internal helpers such as
-- fanout._group_unread are granted to nobody).
GRANT EXECUTE ON FUNCTION
    fanout._may(text, text),
    fanout._may_see_grant(text, regrole),
    fanout._topic_view(bigint),
    fanout._scheduled_count(bigint)
TO fanout_admin, fanout_producer, fanout_consumer;
GRANT EXECUTE ON FUNCTION fanout._sequence_gap_rows() TO fanout_admin, fanout_consumer;
GRANT EXECUTE ON FUNCTION fanout._group_view(bigint) TO fanout_admin, fanout_consumer;
GRANT EXECUTE ON FUNCTION fanout._topic_group_view(bigint) TO fanout_admin, fanout_consumer;
GRANT EXECUTE ON FUNCTION fanout._kpart_view(bigint, int) TO fanout_admin, fanout_consumer;

GRANT SELECT ON fanout.topics TO fanout_admin, fanout_producer, fanout_consumer;
GRANT SELECT ON fanout.captures TO fanout_admin, fanout_producer, fanout_consumer;
GRANT SELECT ON fanout.dead_letters TO fanout_admin, fanout_consumer;
GRANT SELECT ON fanout.groups TO fanout_admin, fanout_consumer;
GRANT SELECT ON fanout.partitions TO fanout_admin, fanout_consumer;
GRANT EXECUTE ON FUNCTION fanout.partition_stats() TO fanout_admin, fanout_consumer;
GRANT SELECT ON fanout.sequence_gaps TO fanout_admin, fanout_consumer;
GRANT SELECT ON fanout.topic_grants TO fanout_admin, fanout_producer, fanout_consumer;

-- The installed version (fanout.version): anyone with a pgq role may ask.
GRANT EXECUTE ON FUNCTION fanout.version() TO fanout_admin, fanout_producer, fanout_consumer;

-- fanout.maintain is a procedure (it commits), which ALL FUNCTIONS above
-- does not cover: an operator's, like run_maintenance.
REVOKE ALL ON PROCEDURE fanout.maintain(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON PROCEDURE fanout.maintain(timestamptz) TO fanout_admin;
