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

-- Change capture: triggers now run a generated function per capture
-- (fanout_data.capture_<id>(), fanout._capture_install) instead of
-- fanout._capture_trigger(), which this upgrade drops. The captured tables'
-- triggers are dropped here (they depend on it) and re-created by after.sql.
DO $upgrade$
DECLARE
    r record;
BEGIN
    CREATE TEMP TABLE IF NOT EXISTS pgq_upgrade_captures (capture_id bigint, table_oid oid) ON COMMIT DROP;
    IF to_regprocedure('fanout._capture_trigger()') IS NULL THEN
        RETURN;
    END IF;
    FOR r IN
        SELECT DISTINCT tg.tgrelid, split_part(encode(tg.tgargs, 'escape'), '\000', 1)::bigint AS capture_id
        FROM pg_trigger tg
        WHERE tg.tgfoid = 'fanout._capture_trigger()'::regprocedure AND tg.tgname = 'fanout_capture_ins'
    LOOP
        INSERT INTO pgq_upgrade_captures VALUES (r.capture_id, r.tgrelid);
    END LOOP;
    FOR r IN
        SELECT tg.tgrelid, tg.tgname FROM pg_trigger tg
        WHERE tg.tgfoid = 'fanout._capture_trigger()'::regprocedure
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.tgrelid::regclass);
    END LOOP;
END
$upgrade$;

-- Priority on key-partitioned topics: each key partition's window is read by
-- priority level like a group's (fanout._window_walk), so its position
-- carries a level cursor too (NULL: the window is read in commit order).
ALTER TABLE fanout.kpart ADD COLUMN IF NOT EXISTS prio_level smallint;
ALTER TABLE fanout.kpart ADD COLUMN IF NOT EXISTS prio_txid xid8;
ALTER TABLE fanout.kpart ADD COLUMN IF NOT EXISTS prio_id bigint;

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

-- Wake-ups only for waiting consumers (docs/wakeups.md). notify_when says
-- when a topic with notify sends its NOTIFY: 'always' (every publishing
-- statement, as before: the value of every topic that existed before this
-- column, so their LISTEN-only consumers keep being woken) or 'waiters'
-- (only while some consumer announced its wait: fanout.wait_begin).
ALTER TABLE fanout.topic ADD COLUMN IF NOT EXISTS notify_when text NOT NULL DEFAULT 'always';
-- The announced waits: one row per waiting consumer (waiter, a token of the
-- client's) and topic, valid until `until` (a consumer that dies without
-- fanout.wait_end costs publishers NOTIFYs until then, no longer).
-- Unlogged: a crash empties it, and consumers asleep then wake on their
-- poll interval. No foreign key: its check would lock the topic row.
CREATE UNLOGGED TABLE IF NOT EXISTS fanout.waiter (
    topic_id  bigint NOT NULL,
    waiter    text NOT NULL,
    until     timestamptz NOT NULL,
    PRIMARY KEY (topic_id, waiter)
);
REVOKE ALL ON fanout.waiter FROM PUBLIC;

-- Per group: messages its members acked and nacked (counters for the
-- sidecar's pgq_group_acked_total / pgq_group_nacked_total and the groups
-- view). One row per lease slot (fanout._tally, called once by each ack and
-- nack call): an ack already holds its slot's lease row, so counting there
-- adds no lock another member could wait for, where a row per group would
-- serialize every member's ack behind the others' business transactions.
-- slot_id 0 holds what deleted slots had counted (folded in by the trigger
-- on fanout.lease deletes, fanout._tally_fold). No foreign keys (an insert
-- would lock the group row); a group's rows go with it (trigger on
-- fanout.consumer_group deletes).
CREATE TABLE IF NOT EXISTS fanout.group_tally (
    group_id  bigint NOT NULL,
    slot_id   bigint NOT NULL,
    acked     bigint NOT NULL DEFAULT 0,
    nacked    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (group_id, slot_id)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
REVOKE ALL ON fanout.group_tally FROM PUBLIC;

-- Per topic: the ids its sequence handed out in the storage partitions it
-- has jumped past (fanout._manage_partitions adds the partition's at each
-- jump). With the open partition's, that is what the topic published
-- (rolled-back publishes included): pgq_topic_published_messages_total.
CREATE TABLE IF NOT EXISTS fanout.topic_ids_left (
    topic_id  bigint PRIMARY KEY REFERENCES fanout.topic ON DELETE CASCADE,
    ids       bigint NOT NULL
);
REVOKE ALL ON fanout.topic_ids_left FROM PUBLIC;

-- Lease ids that reveal nothing across topics (fanout._lease_code). A
-- page's internal id (fanout.lease.lease_id: slot_id * 2^32 + epoch * 2^16
-- + page_no, slots from one sequence for every topic) stays what every
-- internal look-up uses; callers get a keyed permutation of it, made where
-- read returns it and undone where a lease id comes back (fanout._lease_raw).
-- fanout.lease is not changed. k: a 32-byte key made here from two random
-- UUIDs (244 random bits), readable by pgq's owner only. legacy_until:
-- pages opened before it may still be presented by their internal id, the
-- id release 0.1.0 handed out, while they are their slot's current page:
-- the upgrade's time plus 10 minutes for the 0.1.0 calls in flight while
-- it runs (-infinity on a fresh install, or an install with no topic: no
-- such page).
CREATE TABLE IF NOT EXISTS fanout.lease_key (
    one           boolean PRIMARY KEY DEFAULT true CHECK (one),
    k             bytea NOT NULL CHECK (length(k) = 32),
    legacy_until  timestamptz NOT NULL
);
REVOKE ALL ON fanout.lease_key FROM PUBLIC;
INSERT INTO fanout.lease_key (k, legacy_until)
SELECT decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'),
       CASE WHEN EXISTS (SELECT 1 FROM fanout.topic) THEN clock_timestamp() + interval '10 minutes'
            ELSE '-infinity' END
ON CONFLICT DO NOTHING;
-- Subscription filters (fanout.subscribe(..., filter =>), fanout.set_filter;
-- docs/filters.md): a group's filter is a JSON object its messages' headers
-- must contain. The window walker passes the others over as if acked and
-- counts them: here for an unpartitioned topic's group, on its key
-- partitions' rows (fanout.kpart.filtered) for a partitioned one; the groups
-- view sums them (filtered_total). A row per group that ever had a filter
-- (filter NULL once cleared: the count stays). Not columns of
-- fanout.consumer_group: adding one takes that table's ACCESS EXCLUSIVE
-- lock, which deadlocks an upgrade with traffic (an ack of the release
-- before holds the group table and waits for the topic table, which this
-- migration holds first, fanout.topic above). The topic's has_filters says
-- whether any of its groups ever had one (never cleared): reads of other
-- topics do not look here.
CREATE TABLE IF NOT EXISTS fanout.group_filter (
    group_id  bigint PRIMARY KEY REFERENCES fanout.consumer_group ON DELETE CASCADE,
    filter    jsonb,
    filtered  bigint NOT NULL DEFAULT 0
);
REVOKE ALL ON fanout.group_filter FROM PUBLIC;
ALTER TABLE fanout.topic ADD COLUMN IF NOT EXISTS has_filters boolean NOT NULL DEFAULT false;
ALTER TABLE fanout.kpart ADD COLUMN IF NOT EXISTS filtered bigint NOT NULL DEFAULT 0;
-- When alter_topic(priorities => false) turned a topic's priority order
-- off (NULL: priorities apply once a message has one): reads go in commit
-- order from each position's next window; publishes may still pass a priority.
ALTER TABLE fanout.topic ADD COLUMN IF NOT EXISTS priorities_dropped_at timestamptz;
-- Switching a reference topic to offset completion
-- (fanout.alter_topic(completion => 'offset'), docs/completion-switch.md):
-- the first id the topic's sequence had not handed out at the switch (NULL:
-- never switched; messages below it were stamped in reference mode) and
-- when it switched; until completion_switch_done_at is set the switch is in
-- progress (groups keep their bits, new groups wait: PGQ28). Maintenance
-- records the transactions running once it sees the switch committed
-- (completion_switch_vxids) and finishes it after they have all ended
-- (fanout._completion_switch_finish).
ALTER TABLE fanout.topic ADD COLUMN IF NOT EXISTS completion_switch_id bigint;
ALTER TABLE fanout.topic ADD COLUMN IF NOT EXISTS completion_switched_at timestamptz;
ALTER TABLE fanout.topic ADD COLUMN IF NOT EXISTS completion_switch_vxids text[];
ALTER TABLE fanout.topic ADD COLUMN IF NOT EXISTS completion_switch_done_at timestamptz;

-- Change capture in one message per statement (fanout.capture_table(...,
-- shape => 'statement'); docs/capture.md): shape is 'row' (one message per
-- changed row, as before) or 'statement'; claim_check_rows: a statement of
-- more rows than this (per side) publishes its rows as a claim-check in
-- fanout.capture_chunk instead of inline (NULL for 'row').
ALTER TABLE fanout.capture ADD COLUMN IF NOT EXISTS shape text NOT NULL DEFAULT 'row';
ALTER TABLE fanout.capture ADD COLUMN IF NOT EXISTS claim_check_rows int;
-- A statement message's claim-check: its rows in chunks of up to 500, one
-- json array per chunk (json, not jsonb: built as text, a third of jsonb's
-- cost for the writer; fanout.capture_rows hands them out as jsonb). side:
-- 'inserted' (new images) or 'deleted' (old images); first_row: the
-- 1-based position of the chunk's first row in its side. Released
-- (fanout._capture_release_chunks, run by fanout._cleanup_bookkeeping) once
-- the storage partition of its message is gone, or its topic is; never
-- truncated. No foreign key: its check would lock the topic row.
CREATE TABLE IF NOT EXISTS fanout.capture_chunk (
    topic_id    bigint NOT NULL,
    message_id  bigint NOT NULL,
    side        text NOT NULL,
    first_row   bigint NOT NULL,
    n_rows      int NOT NULL,
    rows        json NOT NULL,
    PRIMARY KEY (topic_id, message_id, side, first_row)
);
REVOKE ALL ON fanout.capture_chunk FROM PUBLIC;
