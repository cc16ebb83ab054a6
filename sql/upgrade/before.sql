-- sql/upgrade/before.sql — hand-written schema changes of the next release,
-- run by its upgrade migration before the changed functions (a new column, a
-- table, an index, a per-topic object for existing topics: loop over
-- fanout.topic and use format('%I')). A fresh install runs it too (it replays
-- every migration), so write it for both. scripts/gen-upgrade.sh copies it into
-- the migration; scripts/release.sh empties it after the release.

-- Lock rows: pgq's own serialisation (one maintenance function at a time,
-- one reconciliation of a topic's stamps at a time) takes a row of this
-- table FOR UPDATE SKIP LOCKED (fanout._try_lock). Advisory locks, which it
-- used before, are open to every role: one without a single grant could
-- take the keys and stall a topic or make maintenance pass its turn. A row
-- lock needs UPDATE on the table, which nobody but the owner has. Rows are
-- created when first needed; drop_topic deletes its topic's.
CREATE TABLE IF NOT EXISTS fanout.lock_row (
    name          text PRIMARY KEY,
    -- A maintenance function that works through the topics in slices
    -- resumes after this topic id on its next call (0: from the start).
    resume_after  bigint NOT NULL DEFAULT 0
);
REVOKE ALL ON fanout.lock_row FROM PUBLIC;

-- Quotas an operator sets per grant (fanout.set_quota): topics a grant's
-- pattern may hold, groups per topic, bytes retained per topic. NULL is
-- no limit. Checked at create_topic, subscribe and publish (PGQ25) against
-- every grant of the caller whose pattern matches the topic.
ALTER TABLE fanout.topic_grant ADD COLUMN IF NOT EXISTS max_topics bigint;
ALTER TABLE fanout.topic_grant ADD COLUMN IF NOT EXISTS max_groups bigint;
ALTER TABLE fanout.topic_grant ADD COLUMN IF NOT EXISTS max_bytes bigint;
INSERT INTO fanout.lock_row (name)
SELECT 'maint:' || f FROM unnest(ARRAY['cleanup_bookkeeping', 'cleanup_groups', 'cleanup_partitions',
    'detect_dead_groups', 'manage_partitions', 'refresh_topic_state', 'sequence_gap_alerts',
    'measure_usage']) f
ON CONFLICT DO NOTHING;

-- Bytes each topic retains (its message, dedupe and completion tables with
-- their indexes), measured by maintenance (fanout._measure_usage) a slice of
-- topics per call, and the topics whose publishing a bytes quota stops
-- (fanout._enter raises PGQ25 while a row names the topic). No foreign
-- keys: their checks would lock the topic row.
CREATE TABLE IF NOT EXISTS fanout.topic_usage (
    topic_id     bigint PRIMARY KEY,
    bytes        bigint NOT NULL,
    measured_at  timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS fanout.quota_block (
    topic_id     bigint PRIMARY KEY,
    pattern      text NOT NULL,
    bytes        bigint NOT NULL,
    max_bytes    bigint NOT NULL,
    since        timestamptz NOT NULL
);
REVOKE ALL ON fanout.topic_usage, fanout.quota_block FROM PUBLIC;
