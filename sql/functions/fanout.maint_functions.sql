-- fanout.maint_functions(): every maintenance function that
-- fanout.maint_operations() may list, whether due now or not, with what it
-- does. The pgq-scheduler sidecar logs them (and registers a job for each)
-- at start, and `pgq-scheduler status` prints them, so that maintenance
-- that is not due yet is visible too. Keep in step with maint_operations
-- (tests/maintenance_test.go checks that both name the same functions).
-- Reads nothing.
CREATE OR REPLACE FUNCTION fanout.maint_functions()
RETURNS TABLE(func text, purpose text)
LANGUAGE sql IMMUTABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    VALUES
        ('fanout._detect_dead_groups',   'mark groups dead that missed dead_after_misses heartbeats'),
        ('fanout._manage_partitions',    'create the next partition and close the old one (rotation)'),
        ('fanout._cleanup_partitions',   'drop closed partitions everyone passed and past retention'),
        ('fanout._cleanup_bookkeeping',  'delete settled leases, idle members and old event_log rows'),
        ('fanout._bitmap_step',          'backfill step of reference-mode bitmaps for new groups'),
        ('fanout._refresh_topic_state',  'refresh the per-topic statistics of fanout.topics'),
        ('fanout._cleanup_groups',       'delete long-cancelled and long-dead groups'),
        ('fanout._sequence_gap_alerts',  'log sequence gaps older than their topic''s gap_alert_after'),
        ('fanout._measure_usage',        'measure the bytes topics retain and stop publishing over a bytes quota')
$fn$;
