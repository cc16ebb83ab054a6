-- 001_schema.sql — pgq catalog (schema fanout), message storage schema
-- (fanout_data) and the three group roles. Functions and triggers are frozen
-- from sql/functions and sql/triggers by later migrations.

DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fanout_admin') THEN
        CREATE ROLE fanout_admin NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fanout_producer') THEN
        CREATE ROLE fanout_producer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'fanout_consumer') THEN
        CREATE ROLE fanout_consumer NOLOGIN;
    END IF;
END
$roles$;

CREATE SCHEMA fanout;
CREATE SCHEMA fanout_data;

-- Nobody but the owner touches tables directly; the API is the functions.
REVOKE ALL ON SCHEMA fanout FROM PUBLIC;
REVOKE ALL ON SCHEMA fanout_data FROM PUBLIC;
GRANT USAGE ON SCHEMA fanout TO fanout_admin, fanout_producer, fanout_consumer;

-- One row per topic. Message data lives in fanout_data.m<topic_id>, named from
-- the id so that no topic name ever becomes an identifier.
CREATE TABLE fanout.topic (
    topic_id                            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic                               text NOT NULL UNIQUE,
    semantics                           text NOT NULL CHECK (semantics IN ('queue', 'pubsub')),
    completion                          text NOT NULL CHECK (completion IN ('offset', 'reference')),
    retention                           interval NOT NULL,
    zero_subscription_retention         interval NOT NULL,
    block_writes_without_subscriptions  boolean NOT NULL,
    max_retention                       interval NOT NULL,
    max_attempts                        int NOT NULL,
    max_payload_bytes                   int NOT NULL,
    zombie_ttl                          interval NOT NULL,
    notify                              boolean NOT NULL,
    partition_interval                  interval NOT NULL,
    data_table                          text NOT NULL,
    seq_name                            text NOT NULL,
    dropped_unread                      bigint NOT NULL DEFAULT 0,
    created_at                          timestamptz NOT NULL DEFAULT now(),
    dedupe_window                       interval NOT NULL DEFAULT '24 hours',
    -- Set by the first publish with a priority: reads then order each
    -- snapshot window by priority (fanout._window_page_priority).
    prioritized                         boolean NOT NULL DEFAULT false,
    -- Per-aggregate sequence ordering (fixed at creation; see fanout.seq_state).
    sequence_ordering                   boolean NOT NULL DEFAULT false,
    gap_alert_after                     interval NOT NULL DEFAULT '5 minutes',
    -- Key partitions (create_topic(..., partitions => P)): NULL = unpartitioned.
    -- Not to be confused with the storage partitions of fanout.partition.
    partitions                          int CHECK (partitions BETWEEN 1 AND 1024),
    whole_transactions                  boolean NOT NULL DEFAULT false
);

-- A consumer group. A queue topic has exactly one, implicit, with group_name
-- NULL: all its readers compete. The read state is a snapshot window
-- (win_lo, win_hi) plus a page cursor (cur_txid, cur_id) inside it
-- (see docs/architecture.md, "Read path").
CREATE TABLE fanout.consumer_group (
    group_id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic_id            bigint NOT NULL REFERENCES fanout.topic ON DELETE CASCADE,
    group_name          text,
    status              text NOT NULL DEFAULT 'active'
                        CHECK (status IN ('active', 'paused', 'dead', 'cancelled')),
    win_lo              pg_snapshot NOT NULL,
    win_hi              pg_snapshot NOT NULL,
    cur_txid            xid8 NOT NULL DEFAULT '0',
    cur_id              bigint NOT NULL DEFAULT 0,
    start_position      text NOT NULL DEFAULT 'earliest',
    effective_start_id  bigint,
    max_backfill        bigint NOT NULL DEFAULT 1000000,
    heartbeat_timeout   interval NOT NULL DEFAULT '5 minutes',
    dead_after_misses   int NOT NULL DEFAULT 3,
    missed_heartbeats   int NOT NULL DEFAULT 0,
    last_heartbeat      timestamptz NOT NULL DEFAULT now(),
    last_read_at        timestamptz,
    delivered           bigint NOT NULL DEFAULT 0,
    lost_messages       bigint NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL DEFAULT now(),
    status_changed_at   timestamptz NOT NULL DEFAULT now(),
    bit_no              int CHECK (bit_no BETWEEN 0 AND 63),   -- reference mode only
    joined_id           bigint NOT NULL DEFAULT 0,             -- first id assigned after it joined
    -- Reference mode: the snapshot of its subscription (or resurrection); a
    -- message whose transaction it does not see is one the group must get
    -- (fanout._reconcile_stamps).
    join_snap           pg_snapshot NOT NULL DEFAULT '1:1:',
    -- Priority topics: the window (win_lo, win_hi) is read by priority level,
    -- highest first, each level in (txid, id) order from (prio_txid, prio_id);
    -- NULL when the window is read in commit order. While a window is read
    -- by priority, (cur_txid, cur_id) stays where the window began, so every
    -- check of "unread" stays conservative (fanout._window_page_priority).
    prio_level          smallint,
    prio_txid           xid8,
    prio_id             bigint,
    -- Partitioned topics: how members get key partitions, fixed by the first
    -- read ('auto': assignment; 'explicit': read(..., partition => k)).
    kpart_mode          text CHECK (kpart_mode IN ('auto', 'explicit')),
    UNIQUE NULLS NOT DISTINCT (topic_id, group_name),
    UNIQUE (topic_id, bit_no)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
       autovacuum_vacuum_cost_delay = 0);  -- updated on every page read: docs/architecture.md, "Catalog tables"

-- Members seen per group (for fanout.groups; throttled writes).
CREATE TABLE fanout.member (
    group_id    bigint NOT NULL REFERENCES fanout.consumer_group ON DELETE CASCADE,
    consumer    text NOT NULL,
    last_seen   timestamptz NOT NULL,
    PRIMARY KEY (group_id, consumer)
) WITH (fillfactor = 70);  -- last_seen updated at most once a second per member (HOT)

-- Lease slots: one page handed to one consumer. Per-message state lives in
-- the arrays (parallel, same order): no per-message rows on the consume
-- path. A slot is a row that is reused: a read puts its page into a free
-- slot of its group (open_count = 0, nothing taken from its last page) by
-- one update, and inserts a slot only when none is free, so the table holds
-- as many rows as a group ever had pages out at once. Only slot_id and
-- group_id are indexed and neither ever changes, so every update (read,
-- ack, nack, takeover, extension) can be HOT: fillfactor 50 keeps room on
-- each page for a new version of its rows, and page pruning frees the old
-- ones without VACUUM. The public lease id is slot_id * 2^32 + epoch * 2^16
-- + page_no: page_no is the slot's page counter (PgQ's batch id), so an ack
-- names one page of one slot and an ack of an earlier page can never settle
-- a later one; epoch is the server incarnation that handed the page out
-- (fanout._epoch), which a failover or crash that rolls this table back
-- cannot roll back, so a page handed out again after such a loss gets
-- another id than the lost one (fencing), see docs/architecture.md, "Leases,
-- acks and fencing".
CREATE TABLE fanout.lease (
    slot_id     bigint GENERATED ALWAYS AS IDENTITY (MAXVALUE 2147483647) PRIMARY KEY,
    group_id    bigint NOT NULL,  -- no FK (a KEY SHARE lock on the group row per page): drop_topic and _cleanup_groups delete leases
    page_no     bigint NOT NULL DEFAULT 1,        -- pages this slot has held (1 .. 2^16 - 1)
    epoch       int NOT NULL,                     -- fanout._epoch() when the current page was handed out
    epoch_since bigint NOT NULL DEFAULT 1,        -- the slot's first page of that epoch
    lease_id    bigint GENERATED ALWAYS AS (slot_id * 4294967296 + epoch * 65536 + page_no) STORED,  -- the current page's id
    consumer    text,
    created_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    msg_ids     bigint[] NOT NULL,
    msg_txids   xid8[] NOT NULL,
    attempts    int[] NOT NULL,
    settled     bigint[] NOT NULL DEFAULT '{}',   -- acked, nacked or dead-lettered by this lease ('{}' once
                                                  -- every message is, with none reclaimed: open_count 0)
    reclaimed   bigint[] NOT NULL DEFAULT '{}',   -- taken over by a later lease after expiry
    open_count  int NOT NULL,                     -- neither settled nor reclaimed
    min_id      bigint NOT NULL,                  -- pins partitions while open
    closed_at   timestamptz,                      -- set when open_count reaches 0
    kpart       int,                              -- partitioned topics: the key partition of the page
    generation  bigint                            -- and its generation when handed out
) WITH (fillfactor = 50, toast_tuple_target = 512, autovacuum_vacuum_scale_factor = 0,
       autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX lease_group_idx ON fanout.lease (group_id);
-- The page's arrays compressed in line (lz4 where the server has it): a page
-- of 100 makes a row of ~0.6 kB instead of ~2.2 kB, so an ack and the next
-- read of the same slot in one transaction (read(..., ack =>), a pipelined
-- client) still fit their three versions on the row's heap page and stay
-- HOT. Uncompressed, the third version moved to a new page on nearly every
-- page read: the table grew by a page per page read until vacuum, and the
-- index by group filled with entries to dead versions (docs/architecture.md,
-- "Catalog tables"). STORAGE MAIN keeps them in line up to a heap page.
DO $do$
DECLARE
    v_alg text := CASE WHEN EXISTS (SELECT 1 FROM pg_settings
                                    WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals))
                       THEN 'lz4' ELSE 'pglz' END;
BEGIN
    EXECUTE format('ALTER TABLE fanout.lease
        ALTER COLUMN msg_ids SET STORAGE MAIN, ALTER COLUMN msg_ids SET COMPRESSION %1$s,
        ALTER COLUMN msg_txids SET STORAGE MAIN, ALTER COLUMN msg_txids SET COMPRESSION %1$s,
        ALTER COLUMN attempts SET STORAGE MAIN, ALTER COLUMN attempts SET COMPRESSION %1$s,
        ALTER COLUMN settled SET STORAGE MAIN, ALTER COLUMN settled SET COMPRESSION %1$s,
        ALTER COLUMN reclaimed SET STORAGE MAIN, ALTER COLUMN reclaimed SET COMPRESSION %1$s', v_alg);
END
$do$;

-- Messages waiting for redelivery after nack (or dead-letter replay).
CREATE TABLE fanout.retry (
    group_id    bigint NOT NULL REFERENCES fanout.consumer_group ON DELETE CASCADE,
    message_id  bigint NOT NULL,
    txid        xid8 NOT NULL,
    attempt     int NOT NULL,          -- deliveries so far
    not_before  timestamptz NOT NULL,
    last_error  text,
    kpart       int,                   -- partitioned topics: the message's key partition
    PRIMARY KEY (group_id, message_id)
) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX retry_due_idx ON fanout.retry (group_id, not_before);
CREATE INDEX retry_kpart_idx ON fanout.retry (group_id, kpart) WHERE kpart IS NOT NULL;

-- Partitioned topics: one row per (group, key partition). Each has its own
-- snapshot window and cursor (same algorithm as the group's in
-- fanout.consumer_group, whose window stays the group's starting point),
-- its owner (the member it is assigned to; NULL = free) and generation
-- (bumped at every ownership change), and its current page: the next page of
-- a key partition is handed out only once this lease is settled
-- (fanout._kpart_read). "kpart" names key partitions everywhere, to keep
-- them apart from the storage partitions of fanout.partition.
CREATE TABLE fanout.kpart (
    group_id     bigint NOT NULL REFERENCES fanout.consumer_group ON DELETE CASCADE,
    kpart        int NOT NULL,
    win_lo       pg_snapshot NOT NULL,
    win_hi       pg_snapshot NOT NULL,
    cur_txid     xid8 NOT NULL DEFAULT '0',
    cur_id       bigint NOT NULL DEFAULT 0,
    owner        text,
    generation   bigint NOT NULL DEFAULT 0,
    owned_at     timestamptz,
    lease_id     bigint,                -- the current page (no foreign key: leases are cleaned up)
    delivered    bigint NOT NULL DEFAULT 0,
    last_read_at timestamptz,
    PRIMARY KEY (group_id, kpart)
) WITH (fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
       autovacuum_vacuum_cost_delay = 0);  -- updated on every page read, like consumer_group
CREATE INDEX kpart_owner_idx ON fanout.kpart (group_id, owner);

-- Dead letters keep a copy of the message so that they outlive partition drops.
CREATE TABLE fanout.dead_letter (
    group_id        bigint NOT NULL REFERENCES fanout.consumer_group ON DELETE CASCADE,
    message_id      bigint NOT NULL,
    txid            xid8 NOT NULL,
    payload         jsonb NOT NULL,
    headers         jsonb NOT NULL,
    message_group   text,
    published_at    timestamptz NOT NULL,
    attempts        int NOT NULL,
    last_error      text,
    dead_at         timestamptz NOT NULL,
    PRIMARY KEY (group_id, message_id)
);

-- Idempotent publish: the message id each dedupe key got lives in a table
-- of the topic's own, fanout_data.m<topic_id>_dedupe (dedupe_key text
-- COLLATE "C" PRIMARY KEY, message_id, created_at), made by
-- fanout.create_topic and dropped by fanout.drop_topic. A key is taken again
-- once its row is older than the topic's dedupe_window; maintenance deletes
-- such rows (fanout._cleanup_bookkeeping). A rolled-back publish rolls its
-- row back with it, freeing the key. One table per topic rather than one
-- keyed by (topic_id, dedupe_key): the claim of a key (heap row, index
-- entry, their WAL, the comparisons down the index) cost about a fifth less
-- without the topic column (measured), topics do not share index pages, and
-- a tenant's keys go with its topic. The key is compared byte-wise
-- (COLLATE "C"): only equality matters, and in a database with a linguistic
-- default collation every comparison of the primary-key insert would go
-- through the locale (about 30 % of the insert with ICU, measured). No index
-- on created_at: its entry was about 15 % of a key's claim (measured), and
-- cleanup does not need it: it sweeps each topic's table in block ranges
-- (fanout.dedupe_sweep) and deletes what is past the window. A BRIN index
-- would be cheaper to write than a B-tree, but cleanup frees blocks all over
-- the table and new keys refill them, so every block range would soon span
-- the whole window.

-- Where maintenance's sweep of the dedupe tables stands (one row). A pass
-- visits the topics in topic_id order; in each (topic_id) it reads the
-- blocks that were there when it got to the topic, 100 per call, from
-- next_block up to pass_end (next_block NULL: no pass under way). The next
-- pass begins once the last one began an eighth of the shortest
-- dedupe_window ago (at least a minute, at most an hour), so a key's row
-- outlives its window by about that plus the length of a pass.
CREATE TABLE fanout.dedupe_sweep (
    one           boolean PRIMARY KEY DEFAULT true CHECK (one),
    topic_id      bigint,
    next_block    bigint,
    pass_end      bigint,
    pass_started  timestamptz
);
INSERT INTO fanout.dedupe_sweep DEFAULT VALUES;

-- Sequence-ordered topics: each (aggregate, sequence) published, so that a
-- repeated one returns the first message's id and inserts nothing. Rows go
-- after the topic's max_retention (fanout._cleanup_bookkeeping). No foreign
-- key to fanout.topic: its check locked the topic row (FOR KEY SHARE) once
-- per row; fanout.drop_topic deletes them (publishers of the topic hold its
-- advisory lock, so none can slip in).
CREATE TABLE fanout.seq_published (
    topic_id      bigint NOT NULL,
    message_group text NOT NULL,
    seq           bigint NOT NULL,
    message_id    bigint NOT NULL,
    created_at    timestamptz NOT NULL,
    PRIMARY KEY (topic_id, message_group, seq)
);
CREATE INDEX seq_published_created_idx ON fanout.seq_published (created_at);

-- Per (group, aggregate): every sequence below next_seq was acked or
-- dead-lettered by the group; msg_id is the message with sequence next_seq
-- once it has been handed out (under lease, or waiting for a retry), else
-- NULL. Written only by fanout.read (under the group's row lock).
-- alerted_to: gaps up to this sequence were reported (fanout._sequence_gap_alerts).
CREATE TABLE fanout.seq_state (
    group_id      bigint NOT NULL REFERENCES fanout.consumer_group ON DELETE CASCADE,
    message_group text NOT NULL,
    next_seq      bigint NOT NULL DEFAULT 1,
    msg_id        bigint,
    alerted_to    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (group_id, message_group)
);
CREATE INDEX seq_state_msg_idx ON fanout.seq_state (group_id, msg_id) WHERE msg_id IS NOT NULL;

-- Per group: messages of a sequence-ordered topic that came before their
-- turn (a lower sequence not yet acked or dead-lettered). Released into
-- fanout.retry when their predecessor is done. fanout.sequence_gaps reads
-- only this table and fanout.seq_state: O(waiting messages).
CREATE TABLE fanout.seq_wait (
    group_id      bigint NOT NULL REFERENCES fanout.consumer_group ON DELETE CASCADE,
    message_group text NOT NULL,
    seq           bigint NOT NULL,
    message_id    bigint NOT NULL,
    txid          xid8 NOT NULL,
    parked_at     timestamptz NOT NULL,
    PRIMARY KEY (group_id, message_group, seq)
);
CREATE INDEX seq_wait_msg_idx ON fanout.seq_wait (group_id, message_id);

-- Per group: sequences of aggregates whose message cleanup dropped while it
-- waited for its turn (fanout._release_lost, counted in lost_messages); the
-- aggregate moves past each when its turn comes (fanout._sequence_advance)
-- instead of waiting for a message that is gone.
CREATE TABLE fanout.seq_lost (
    group_id      bigint NOT NULL REFERENCES fanout.consumer_group ON DELETE CASCADE,
    message_group text NOT NULL,
    seq           bigint NOT NULL,
    PRIMARY KEY (group_id, message_group, seq)
);

-- Per group: handed-out messages of a sequence-ordered topic that were acked
-- or dead-lettered since the group's last read. ack only inserts here (no
-- lock on shared rows inside business transactions); the next read advances
-- fanout.seq_state and releases the waiters.
CREATE TABLE fanout.seq_done (
    group_id      bigint NOT NULL REFERENCES fanout.consumer_group ON DELETE CASCADE,
    message_id    bigint NOT NULL
);
CREATE INDEX seq_done_group_idx ON fanout.seq_done (group_id);

-- Partitions of each topic's message table: id ranges, opened by rotation.
-- txid_bound is set when the partition is closed: every row in it has a txid
-- below it (see docs/architecture.md, "Partitions").
CREATE TABLE fanout.partition (
    topic_id    bigint NOT NULL REFERENCES fanout.topic ON DELETE CASCADE,
    part_no     int NOT NULL,
    lo_id       bigint NOT NULL,
    hi_id       bigint NOT NULL,
    relname     text NOT NULL,
    created_at  timestamptz NOT NULL,
    created_xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    -- When it became the partition publishers write to (the first one: at
    -- creation; the others: at the jump into them). NULL for the partition
    -- kept ready ahead of the open one (fanout._manage_partitions).
    opened_at   timestamptz,
    closed_at   timestamptz,
    txid_bound  xid8,
    truncated_at timestamptz,           -- emptied by cleanup; dropped when the parent is free
    -- Transactions (virtual ids) of the database that were running when
    -- this partition's creation was first seen committed (stale_at): their
    -- cached partition list may predate it, so the sequence jumps into it
    -- only once they have all ended, or, past a bound, once none of them
    -- holds the topic's table (fanout._manage_partitions).
    stale_vxids text[],
    stale_at    timestamptz,
    -- Once those have ended, the transaction that refreshed every session's
    -- partition list (a no-op catalog update of the parent that sends a
    -- relation cache invalidation), and the transactions running when it
    -- was seen committed (refresh_at): the jump waits for them as for the
    -- first set (fanout._manage_partitions).
    refresh_xid   xid8,
    refresh_vxids text[],
    refresh_at    timestamptz,
    -- Summary of a closed partition once no transaction can still write it
    -- (fanout._summarize_partitions): its committed rows never change again,
    -- so a group that has not reached it has exactly row_count unread there,
    -- without counting (fanout._group_unread). first_txid/first_id: its
    -- first row in (txid, id) order.
    row_count   bigint,
    first_txid  xid8,
    first_id    bigint,
    oldest_published_at timestamptz,
    PRIMARY KEY (topic_id, part_no)
);

-- Every loss-relevant maintenance action (max_retention drops of unread data,
-- dead-lettering by lease expiry, forced removals) is logged here.
CREATE TABLE fanout.event_log (
    event_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    topic       text NOT NULL,
    group_name  text,
    kind        text NOT NULL,
    count       bigint NOT NULL DEFAULT 0,
    detail      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX event_log_at_idx ON fanout.event_log (at);

-- Topics a maintenance function passed by because another transaction held
-- a lock it needed (an alter or a drop of the topic left open, DDL on its
-- tables): one row per function and topic while it is being passed by,
-- deleted once the function gets through it again. fanout.maint_skips()
-- shows them; the pgq-scheduler's /healthz turns "degraded" when one has
-- been passed by for longer than a threshold. No foreign key to the topic:
-- its check would lock the topic row (FOR KEY SHARE) and wait for exactly
-- the transaction being passed by.
CREATE TABLE fanout.maint_skip (
    func        text NOT NULL,
    topic_id    bigint NOT NULL,
    topic       text NOT NULL,
    first_at    timestamptz NOT NULL,
    last_at     timestamptz NOT NULL,
    skips       bigint NOT NULL DEFAULT 1,
    reason      text NOT NULL,
    PRIMARY KEY (func, topic_id)
);

-- Leadership among pgq-scheduler sidecars: one row per elected role, held by
-- renewing it before expires_at (no session state, so it works through
-- PgBouncer in transaction pooling mode).
CREATE TABLE fanout.leader (
    name        text PRIMARY KEY,
    leader_id   text NOT NULL,
    elected_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- Reference mode: the exact bitmap of the groups every new message requires
-- (active and paused groups), kept by a trigger on fanout.consumer_group and
-- read by the BEFORE INSERT trigger of each reference topic's message table.
-- epoch counts the mask's changes; epoch_seq holds the newest epoch outside
-- MVCC (a sequence), so an insert whose snapshot predates a change can tell
-- that its stamp may be stale (fanout._required_groups_trigger).
CREATE TABLE fanout.topic_state (
    topic_id      bigint PRIMARY KEY REFERENCES fanout.topic ON DELETE CASCADE,
    required_mask bigint NOT NULL DEFAULT 0,
    epoch         bigint NOT NULL DEFAULT 1,
    epoch_seq     regclass NOT NULL,
    refreshed_at  timestamptz NOT NULL DEFAULT now()
);

-- Reference mode: transactions whose messages may carry a stale
-- required_groups stamp, because they were writing (or their snapshot was
-- taken) while a group joined or left. Once such a transaction has ended,
-- fanout._reconcile_stamps fixes its rows' stamps and deletes the row;
-- until then readers do not pass its messages unreconciled and cleanup does
-- not drop partitions that may hold them.
-- No unique key on purpose: a transaction lists itself while a membership
-- change may list it too, and a unique check would make one wait for the
-- other (or, under REPEATABLE READ, fail). Duplicates are harmless.
CREATE TABLE fanout.stamp_pending (
    topic_id  bigint NOT NULL REFERENCES fanout.topic ON DELETE CASCADE,
    txid      xid8 NOT NULL
);
CREATE INDEX stamp_pending_idx ON fanout.stamp_pending (topic_id, txid);

-- Reference mode: one backfill (late join or resurrection) or release (dead
-- group) job per group, checkpointed after every batch.
CREATE TABLE fanout.bitmap_job (
    group_id     bigint NOT NULL REFERENCES fanout.consumer_group ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('backfill', 'release')),
    status       text NOT NULL CHECK (status IN ('not_started', 'in_progress', 'completed', 'cancelled', 'failed')),
    scope        text NOT NULL DEFAULT 'pending_only',
    from_id      bigint NOT NULL,
    upto_id      bigint,                -- set by the first step: the last id then assigned
    next_id      bigint NOT NULL,       -- checkpoint: the next batch starts here
    fence_txids  xid8[],                -- writers running at the first step; see fanout._bitmap_step
    batch_size   int NOT NULL,
    processed    bigint NOT NULL DEFAULT 0,
    changed      bigint NOT NULL DEFAULT 0,
    total        bigint,
    started_at   timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    last_error   text,
    PRIMARY KEY (group_id, kind)
);

-- The row type of fanout.message_status: a named type lets its inputs be
-- called topic and message_id (named-argument calls) while its output
-- columns carry the same names.
CREATE TYPE fanout.message_status_row AS (
    topic           text,
    message_id      bigint,
    group_name      text,
    status          text,
    passed          boolean,
    required        boolean,
    completed       boolean,
    message_status  text
);

-- Change capture (fanout.capture_table): one row per captured table. The
-- table's four triggers (fanout_capture_ins/_upd/_del/_trunc) name the row
-- by capture_id, which survives pg_dump/pg_restore (a table's oid does not).
-- key_columns: the primary key when captured (message_group of every
-- message); columns: the columns of the row images (NULL: all), minus
-- exclude_columns. Rows whose triggers are gone (the table was dropped, or
-- the triggers by hand) are removed by fanout._cleanup_bookkeeping.
CREATE TABLE fanout.capture (
    capture_id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic           text NOT NULL,
    key_columns     text[] NOT NULL,
    columns         text[],
    exclude_columns text[] NOT NULL DEFAULT '{}',
    created_by      text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- Tenant isolation ----------------------------------------------------------
-- Per-topic grants (fanout.grant_topic / revoke_topic, view fanout.topic_grants).
-- A caller needs its group role (fanout_producer / fanout_consumer /
-- fanout_admin) and a grant here whose pattern matches the topic: the exact
-- topic name, or a prefix pattern ending in '%' ('%' alone: every topic).
-- An 'admin' grant also allows publish and consume on the topics it matches.
CREATE TABLE fanout.topic_grant (
    pattern     text NOT NULL,
    role        regrole NOT NULL,
    privilege   text NOT NULL CHECK (privilege IN ('publish', 'consume', 'admin')),
    granted_by  text NOT NULL,
    granted_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pattern, role, privilege)
);
-- Existing installs keep working: every producer may publish to, every
-- consumer consume from and every admin administer every topic. Revoking
-- these (fanout.revoke_topic('%', ...)) turns isolation on.
INSERT INTO fanout.topic_grant (pattern, role, privilege, granted_by) VALUES
    ('%', 'fanout_producer', 'publish', 'install'),
    ('%', 'fanout_consumer', 'consume', 'install'),
    ('%', 'fanout_admin', 'admin', 'install');
