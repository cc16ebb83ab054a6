-- sql/upgrade/after.sql — hand-written backfills of the next release, run by
-- its upgrade migration after the changed functions and before
-- fanout.regenerate_topics(). Keep each statement bounded: the migration is
-- one transaction. scripts/release.sh empties it after the release.

-- Every topic's lock row for the reconciliation of its stamps
-- (fanout._reconcile_stamps; create_topic makes it for new topics).
INSERT INTO fanout.lock_row (name)
SELECT 'reconcile:' || t.topic_id FROM fanout.topic t
ON CONFLICT DO NOTHING;
