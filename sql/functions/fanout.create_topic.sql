-- fanout.create_topic(topic, semantics, completion, retention, ...options):
-- creates a topic: its catalog row, its message table fanout_data.m<id>
-- (range-partitioned by message id into segments, the first made now), its id
-- sequence, its table of dedupe keys (fanout_data.m<id>_dedupe), its
-- generated insert and page functions (fanout_data.m<id>_*),
-- the NOTIFY trigger (when notify) and, for queue topics, the one
-- implicit consumer group. notify_when: 'waiters' (the default) NOTIFYs
-- only while a consumer announced its wait (fanout.wait_begin), 'always'
-- on every publishing statement, for consumers that LISTEN without
-- announcing (docs/wakeups.md).
-- segment_interval (default 1 hour) is how much time one segment of the
-- message table covers; partition_interval is its deprecated alias (both
-- with different values: PGQ03, fanout._segment_interval).
-- Idempotent: called again with the same settings it returns the same id;
-- with different settings it raises PGQ02 naming them.
-- Returns the topic id.
-- Partitioned topics (partitions => P, 1..1024) get a kpart column (the key
-- partition of each message, fanout._kpart_of) with an index on
-- (kpart, txid, id); whole_transactions (partitioned topics only) keeps a
-- producer transaction's messages of one key partition in one page.
-- Reference-mode topics (completion => 'reference', pubsub only) also get
-- a per-message required_groups bitmap, an index on id, the BEFORE INSERT
-- trigger that stamps required_groups, the completion table
-- fanout_data.m<id>_done (in segments like the messages) and a
-- fanout.topic_state row.
-- Raises: PGQ03 bad option, PGQ04 bad name, PGQ02 settings differ, PGQ25
-- (a topics quota of a grant matching the name: fanout.set_quota).
-- Tables: fanout.topic, fanout.topic_grant (quota rows locked), fanout.lock_row, fanout.partition, fanout.consumer_group, fanout.kpart,
-- fanout.topic_state, fanout_data.*.
CREATE OR REPLACE FUNCTION fanout.create_topic(
    topic                               text,
    semantics                           text DEFAULT 'queue',
    completion                          text DEFAULT 'offset',
    retention                           interval DEFAULT '24 hours',
    zero_subscription_retention         interval DEFAULT '24 hours',
    block_writes_without_subscriptions  boolean DEFAULT false,
    max_retention                       interval DEFAULT '30 days',
    max_attempts                        int DEFAULT 5,
    max_payload_bytes                   int DEFAULT 1048576,
    zombie_ttl                          interval DEFAULT '7 days',
    notify                              boolean DEFAULT true,
    partition_interval                  interval DEFAULT NULL,
    dedupe_window                       interval DEFAULT '24 hours',
    sequence_ordering                   boolean DEFAULT false,
    gap_alert_after                     interval DEFAULT '5 minutes',
    partitions                          int DEFAULT NULL,
    whole_transactions                  boolean DEFAULT false,
    notify_when                         text DEFAULT 'waiters',
    segment_interval                    interval DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    p_topic ALIAS FOR $1;
    v_new   fanout.topic;
    v_old   fanout.topic;
    v_ins   fanout.topic;
    v_diff  text[];
BEGIN
    PERFORM fanout._authorize($1, 'admin');
    p_topic := fanout._check_name('topic', p_topic);  -- NFC
    v_new.topic := p_topic;
    v_new.semantics := fanout._normalize_option('semantics', $2);
    v_new.completion := fanout._normalize_option('completion', $3);
    v_new.retention := $4;
    v_new.zero_subscription_retention := $5;
    v_new.block_writes_without_subscriptions := $6;
    v_new.max_retention := $7;
    v_new.max_attempts := $8;
    v_new.max_payload_bytes := $9;
    v_new.zombie_ttl := $10;
    v_new.notify := $11;
    v_new.partition_interval := coalesce(fanout._segment_interval($19, $12), '1 hour');
    v_new.dedupe_window := $13;
    v_new.sequence_ordering := $14;
    v_new.gap_alert_after := $15;
    v_new.partitions := $16;
    v_new.whole_transactions := $17;
    v_new.notify_when := lower($18);
    PERFORM fanout._check_topic_settings(v_new);
    IF v_new.semantics = 'queue' AND v_new.completion <> 'offset' THEN
        RAISE EXCEPTION 'completion % applies to pubsub topics only; a queue topic message needs one ack',
            v_new.completion USING ERRCODE = 'PGQ03';
    END IF;

    -- Concurrent creators of one name meet on the name's unique index: the
    -- second insert waits for the first transaction and, once it committed,
    -- inserts nothing; the loop then finds the topic (a fresh snapshot in
    -- READ COMMITTED) and compares settings. A row lock of pgq's own, not an
    -- advisory lock any role could take on the name.
    LOOP
        SELECT * INTO v_old FROM fanout.topic t WHERE t.topic = p_topic;
        IF FOUND THEN
            SELECT array_agg(k ORDER BY k) INTO v_diff
            FROM (VALUES
                ('semantics', v_old.semantics IS DISTINCT FROM v_new.semantics),
                ('completion', v_old.completion IS DISTINCT FROM v_new.completion),
                ('retention', v_old.retention IS DISTINCT FROM v_new.retention),
                ('zero_subscription_retention', v_old.zero_subscription_retention IS DISTINCT FROM v_new.zero_subscription_retention),
                ('block_writes_without_subscriptions', v_old.block_writes_without_subscriptions IS DISTINCT FROM v_new.block_writes_without_subscriptions),
                ('max_retention', v_old.max_retention IS DISTINCT FROM v_new.max_retention),
                ('max_attempts', v_old.max_attempts IS DISTINCT FROM v_new.max_attempts),
                ('max_payload_bytes', v_old.max_payload_bytes IS DISTINCT FROM v_new.max_payload_bytes),
                ('zombie_ttl', v_old.zombie_ttl IS DISTINCT FROM v_new.zombie_ttl),
                ('notify', v_old.notify IS DISTINCT FROM v_new.notify),
                ('segment_interval', v_old.partition_interval IS DISTINCT FROM v_new.partition_interval),
                ('dedupe_window', v_old.dedupe_window IS DISTINCT FROM v_new.dedupe_window),
                ('sequence_ordering', v_old.sequence_ordering IS DISTINCT FROM v_new.sequence_ordering),
                ('gap_alert_after', v_old.gap_alert_after IS DISTINCT FROM v_new.gap_alert_after),
                ('partitions', v_old.partitions IS DISTINCT FROM v_new.partitions),
                ('whole_transactions', v_old.whole_transactions IS DISTINCT FROM v_new.whole_transactions),
                ('notify_when', v_old.notify_when IS DISTINCT FROM v_new.notify_when)
            ) AS d(k, differs)
            WHERE differs;
            IF v_diff IS NOT NULL THEN
                RAISE EXCEPTION 'topic % already exists with different settings: %',
                    quote_literal(p_topic), array_to_string(v_diff, ', ')
                    USING ERRCODE = 'PGQ02', HINT = 'use fanout.alter_topic() to change settings';
            END IF;
            RETURN v_old.topic_id;
        END IF;
        -- A new topic: the quotas of the grants whose patterns match it (PGQ25).
        PERFORM fanout._quota_check(p_topic, 'topics');
        INSERT INTO fanout.topic AS t (topic, semantics, completion, retention, zero_subscription_retention,
            block_writes_without_subscriptions, max_retention, max_attempts, max_payload_bytes, zombie_ttl,
            notify, partition_interval, data_table, seq_name, dedupe_window, sequence_ordering, gap_alert_after,
            partitions, whole_transactions, notify_when)
        VALUES (p_topic, v_new.semantics, v_new.completion, v_new.retention, v_new.zero_subscription_retention,
            v_new.block_writes_without_subscriptions, v_new.max_retention, v_new.max_attempts,
            v_new.max_payload_bytes, v_new.zombie_ttl, v_new.notify, v_new.partition_interval, '', '',
            v_new.dedupe_window, v_new.sequence_ordering, v_new.gap_alert_after, v_new.partitions,
            v_new.whole_transactions, v_new.notify_when)
        ON CONFLICT (topic) DO NOTHING
        RETURNING * INTO v_ins;
        EXIT WHEN v_ins.topic_id IS NOT NULL;
        -- (Under REPEATABLE READ the insert raises 40001 instead of finding
        -- nothing, so this loops only while creators commit and drops follow.)
    END LOOP;
    v_new := v_ins;

    v_new.data_table := 'm' || v_new.topic_id;
    v_new.seq_name := v_new.data_table || '_id_seq';
    UPDATE fanout.topic t SET data_table = v_new.data_table, seq_name = v_new.seq_name
    WHERE t.topic_id = v_new.topic_id;
    -- Its lock rows: of its stamps' reconciliation (fanout._reconcile_stamps)
    -- and of subscribes of new groups (fanout.subscribe).
    INSERT INTO fanout.lock_row (name) VALUES ('reconcile:' || v_new.topic_id), ('subscribe:' || v_new.topic_id)
    ON CONFLICT DO NOTHING;

    EXECUTE format('CREATE SEQUENCE fanout_data.%I AS bigint MINVALUE 1 START 1', v_new.seq_name);
    -- txid first: publish takes its xid before its id (see _manage_partitions).
    EXECUTE format($ddl$
        CREATE TABLE fanout_data.%I (
            txid          xid8        NOT NULL DEFAULT pg_current_xact_id(),
            id            bigint      NOT NULL DEFAULT nextval(%L::regclass),
            published_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
            message_group text,
            deliver_at    timestamptz,
            priority      smallint,
            seq           bigint,
            headers       jsonb       NOT NULL DEFAULT '{}',
            payload       jsonb       NOT NULL
        ) PARTITION BY RANGE (id)$ddl$,
        v_new.data_table, 'fanout_data.' || quote_ident(v_new.seq_name));
    EXECUTE format('ALTER SEQUENCE fanout_data.%I OWNED BY fanout_data.%I.id', v_new.seq_name, v_new.data_table);
    EXECUTE format('CREATE INDEX %I ON fanout_data.%I (txid, id)', v_new.data_table || '_txid_id', v_new.data_table);
    -- Idempotent publish: the id each dedupe key got (why a table per topic:
    -- the schema's comment above fanout.dedupe_sweep).
    EXECUTE format($ddl$
        CREATE TABLE fanout_data.%I (
            dedupe_key  text COLLATE "C" PRIMARY KEY,
            message_id  bigint      NOT NULL,
            created_at  timestamptz NOT NULL,
            claim_txid  xid8        NOT NULL DEFAULT pg_current_xact_id()  -- the claiming top-level transaction
        )$ddl$, v_new.data_table || '_dedupe');
    -- Delayed messages (publish(..., deliver_at)): counted by fanout.topics.
    EXECUTE format('CREATE INDEX %I ON fanout_data.%I (deliver_at) WHERE deliver_at IS NOT NULL',
                   v_new.data_table || '_deliver_at', v_new.data_table);
    IF v_new.partitions IS NOT NULL THEN
        -- Key partitions: each message's, set by the insert functions; one
        -- index serves the pages of one key partition (m<id>_page).
        EXECUTE format('ALTER TABLE fanout_data.%I ADD COLUMN kpart int NOT NULL', v_new.data_table);
        EXECUTE format('CREATE INDEX %I ON fanout_data.%I (kpart, txid, id)',
                       v_new.data_table || '_kpart', v_new.data_table);
    END IF;
    -- Priority topics read each level in (txid, id) order (fanout._window_walk);
    -- priority 0 is stored as NULL and read through the (txid, id) index.
    EXECUTE format('CREATE INDEX %I ON fanout_data.%I (priority, txid, id) WHERE priority IS NOT NULL',
                   v_new.data_table || '_priority', v_new.data_table);
    IF v_new.completion = 'reference' THEN
        -- The required bitmap, an id index for batched backfill and release,
        -- and the trigger that stamps required_groups at insert.
        EXECUTE format('ALTER TABLE fanout_data.%I ADD COLUMN required_groups bigint NOT NULL DEFAULT 0',
                       v_new.data_table);
        EXECUTE format('CREATE INDEX %I ON fanout_data.%I (id)', v_new.data_table || '_id', v_new.data_table);
        PERFORM fanout._create_done_table(v_new.data_table);
        EXECUTE format('CREATE TRIGGER required_groups BEFORE INSERT ON fanout_data.%I '
                       'FOR EACH ROW EXECUTE FUNCTION fanout._required_groups_trigger(%L)',
                       v_new.data_table, v_new.topic_id);
        -- The mask's epoch, readable outside MVCC (fanout._required_groups_trigger).
        EXECUTE format('CREATE SEQUENCE fanout_data.%I AS bigint MINVALUE 1 START 1', v_new.data_table || '_epoch');
        INSERT INTO fanout.topic_state (topic_id, epoch, epoch_seq)
        VALUES (v_new.topic_id, 1, format('fanout_data.%I', v_new.data_table || '_epoch')::regclass);
        PERFORM setval(format('fanout_data.%I', v_new.data_table || '_epoch')::regclass, 1, true);
        EXECUTE format('ALTER SEQUENCE fanout_data.%I OWNED BY fanout_data.%I.id',
                       v_new.data_table || '_epoch', v_new.data_table);
    END IF;
    PERFORM fanout._create_partition(v_new.topic_id, 0);
    PERFORM fanout._create_insert_functions(v_new.topic_id);
    PERFORM fanout._create_page_functions(v_new.topic_id);
    IF v_new.completion = 'reference' THEN
        PERFORM fanout._create_done_function(v_new.topic_id);
    END IF;
    IF v_new.notify THEN
        PERFORM fanout._set_notify(v_new.topic_id, true);
    END IF;

    IF v_new.semantics = 'queue' THEN
        -- The implicit group starts before every transaction ('1:1:'), so it
        -- receives everything ever published, even in this same transaction.
        INSERT INTO fanout.consumer_group (topic_id, group_name, win_lo, win_hi, start_position)
        VALUES (v_new.topic_id, NULL, '1:1:', '1:1:', 'earliest');
        PERFORM fanout._kpart_cursors(v_new.topic_id, NULL);  -- partitioned: its cursors
    END IF;
    RETURN v_new.topic_id;
END
$fn$;
