-- sql/upgrade/after.sql — hand-written backfills of the next release, run by
-- its upgrade migration after the changed functions and before
-- fanout.regenerate_topics(). Keep each statement bounded: the migration is
-- one transaction. scripts/release.sh empties it after the release.

-- Change capture: the triggers before.sql dropped, re-created on the
-- capture's generated function.
DO $upgrade$
DECLARE
    r record;
BEGIN
    IF to_regclass('pg_temp.pgq_upgrade_captures') IS NULL THEN
        RETURN;
    END IF;
    FOR r IN
        SELECT u.capture_id, u.table_oid FROM pg_temp.pgq_upgrade_captures u
        JOIN fanout.capture c ON c.capture_id = u.capture_id
        JOIN pg_class k ON k.oid = u.table_oid
        ORDER BY u.capture_id
    LOOP
        PERFORM fanout._capture_install(r.capture_id, r.table_oid::regclass);
    END LOOP;
END
$upgrade$;

-- Change capture: every capture's generated trigger function made again
-- from the current template (fanout._capture_generate; the triggers keep
-- pointing at it), so captures made before this release run the new one.
-- A capture whose topic is gone keeps its function (its writes fail with
-- PGQ01 until the topic exists again or capture_table is called again).
DO $upgrade$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT c.capture_id FROM fanout.capture c
        WHERE EXISTS (SELECT 1 FROM fanout.topic t WHERE t.topic = c.topic)
          AND to_regprocedure(format('fanout_data.%I()', 'capture_' || c.capture_id)) IS NOT NULL
        ORDER BY c.capture_id
    LOOP
        PERFORM fanout._capture_generate(r.capture_id);
    END LOOP;
END
$upgrade$;

-- Every topic's lock rows: of the reconciliation of its stamps
-- (fanout._reconcile_stamps) and of subscribes of new groups
-- (fanout.subscribe); create_topic makes them for new topics.
INSERT INTO fanout.lock_row (name)
SELECT k || t.topic_id FROM fanout.topic t, unnest(ARRAY['reconcile:', 'subscribe:']) k
ON CONFLICT DO NOTHING;
