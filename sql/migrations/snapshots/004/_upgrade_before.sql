-- sql/upgrade/before.sql — hand-written schema changes of the next release,
-- run by its upgrade migration before the changed functions (a new column, a
-- table, an index, a per-topic object for existing topics: loop over
-- fanout.topic and use format('%I')). A fresh install runs it too (it replays
-- every migration), so write it for both. scripts/gen-upgrade.sh copies it into
-- the migration; scripts/release.sh empties it after the release.

-- Per-topic cap on consumer groups (fanout.alter_topic(max_groups => N);
-- fanout._check_subscribe_limits). 1000 is the cap every topic had before.
ALTER TABLE fanout.topic ADD COLUMN IF NOT EXISTS max_groups int NOT NULL DEFAULT 1000;
-- When alter_topic(sequence_ordering => false) turned a topic's sequence
-- ordering off (NULL: never): publishes may still pass a sequence (it keeps
-- deduplicating by aggregate and sequence), nothing waits for its turn.
ALTER TABLE fanout.topic ADD COLUMN IF NOT EXISTS sequence_dropped_at timestamptz;

-- Per group: messages it dead-lettered since it was created (a counter:
-- purging or replaying dead letters leaves it as it is). Written only by
-- fanout._dead_letter (read's expired attempts, nack's last attempt), in its
-- own row so that a dead-lettering nack inside a business transaction never
-- holds the group's row; the row comes with the group's first dead letter.
CREATE TABLE IF NOT EXISTS fanout.group_stat (
    group_id       bigint PRIMARY KEY REFERENCES fanout.consumer_group ON DELETE CASCADE,
    dead_lettered  bigint NOT NULL DEFAULT 0
);
