-- sql/upgrade/after.sql — hand-written backfills of the next release, run by
-- its upgrade migration after the changed functions and before
-- fanout.regenerate_topics(). Keep each statement bounded: the migration is
-- one transaction. scripts/release.sh empties it after the release.

-- Every topic's lock rows: of the reconciliation of its stamps
-- (fanout._reconcile_stamps) and of subscribes of new groups
-- (fanout.subscribe); create_topic makes them for new topics.
INSERT INTO fanout.lock_row (name)
SELECT k || t.topic_id FROM fanout.topic t, unnest(ARRAY['reconcile:', 'subscribe:']) k
ON CONFLICT DO NOTHING;
