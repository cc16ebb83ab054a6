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

-- Topics switched from reference to offset completion by a build that
-- deleted their topic_state row when the switch finished: the row again
-- (mask 0, the epoch its sequence has), as fanout._completion_switch_finish
-- now leaves it. Their insert trigger stays on the table and lists an insert
-- that sees no row (a snapshot from before a switch to reference,
-- fanout._required_groups_trigger): without the row it would list every one.
INSERT INTO fanout.topic_state (topic_id, required_mask, epoch, epoch_seq)
SELECT t.topic_id, 0, coalesce(pg_sequence_last_value(c.oid::regclass), 1), c.oid::regclass
FROM fanout.topic t
JOIN pg_class c ON c.relname = t.data_table || '_epoch' AND c.relnamespace = 'fanout_data'::regnamespace
WHERE NOT EXISTS (SELECT 1 FROM fanout.topic_state s WHERE s.topic_id = t.topic_id)
ON CONFLICT DO NOTHING;
