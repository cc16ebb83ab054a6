-- sql/upgrade/before.sql — hand-written schema changes of the next release,
-- run by its upgrade migration before the changed functions (a new column, a
-- table, an index, a per-topic object for existing topics: loop over
-- fanout.topic and use format('%I')). A fresh install runs it too (it replays
-- every migration), so write it for both. scripts/gen-upgrade.sh copies it into
-- the migration; scripts/release.sh empties it after the release.

-- Priority on key-partitioned topics: each key partition's window is read by
-- priority level like a group's (fanout._window_walk), so its position
-- carries a level cursor too (NULL: the window is read in commit order).
ALTER TABLE fanout.kpart ADD COLUMN IF NOT EXISTS prio_level smallint;
ALTER TABLE fanout.kpart ADD COLUMN IF NOT EXISTS prio_txid xid8;
ALTER TABLE fanout.kpart ADD COLUMN IF NOT EXISTS prio_id bigint;
