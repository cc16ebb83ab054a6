-- fanout.read(topic, group_name, consumer, max_messages, lease, max_bytes,
-- partition, ack): claims up to max_messages for the caller under one new
-- lease, in this order:
--   1. un-acked messages of the group's expired leases (their attempt grows;
--      the old lease can no longer ack them: fencing),
--   2. nacked messages whose retry time has come,
--   3. the next page of the group's stream (fanout._window_scan, or
--      fanout._window_page_priority once the topic has priorities; on a
--      sequence-ordered topic filtered by fanout._sequence_gate), which
--      also stops before max_bytes (payload + headers + message_group of
--      the page's messages, uncompressed; default 16 MiB): the first message
--      of a page always comes, so no message can make a page impossible.
--      (Redelivered messages of steps 1 and 2 count toward max_messages; each
--      was within the max_bytes of the read that first delivered it.)
-- A message whose delivery would exceed the topic's max_attempts goes to the
-- group's dead letters instead. Members of one group never hold the same
-- message under unexpired leases. Counts as a heartbeat of group and consumer.
-- An idle poll (nothing to hand out, heartbeat fresh) locks and writes nothing
-- (checked first only when the session's previous read of the group was empty).
-- On a partitioned topic (create_topic(..., partitions => P)) the read is
-- fanout._kpart_read: one page of one key partition the consumer owns, or,
-- with partition => k, of partition k (explicit assignment).
-- ack => lease_id first acks that lease (the caller's previous page of this
-- topic and group) as fanout.ack(lease_id) would: a consumer loop then costs
-- one round trip and one commit per page instead of two. If the ack fails
-- (PGQ10, PGQ11, ...) the read fails with it: nothing is acked or read.
-- Must run in READ COMMITTED (the default) so that each statement sees what
-- the previous reader of the group committed.
-- Returns one row per message: lease_id, message_id, payload, headers,
-- message_group, published_at, attempt (1 on first delivery).
-- Raises: PGQ01, PGQ03 (max_messages not in 1..10000, lease not in
-- (0, 24 hours], max_bytes not in 1..536870912), PGQ04 bad consumer name,
-- PGQ09 isolation level, PGQ03 partition out of range or on an unpartitioned
-- topic, PGQ24 (mixing explicit and automatic partition reads), PGQ13, PGQ14, PGQ16 (see fanout._lock_group), PGQ21
-- (no consume grant), PGQ22 (a new consumer beyond 10,000 members); with
-- ack: PGQ03 (a lease of another topic or group), and those of fanout.ack.
-- Tables: fanout.topic, fanout.consumer_group, fanout.member, fanout.lease,
-- fanout.retry, fanout.dead_letter, fanout.partition, fanout_data.m<topic_id>.
CREATE OR REPLACE FUNCTION fanout.read(
    topic        text,
    group_name   text DEFAULT NULL,
    consumer     text DEFAULT NULL,
    max_messages int DEFAULT 100,
    lease        interval DEFAULT '30 seconds',
    max_bytes    bigint DEFAULT 16777216,
    partition    int DEFAULT NULL,
    ack          bigint DEFAULT NULL)
RETURNS TABLE(lease_id bigint, message_id bigint, payload jsonb, headers jsonb,
              message_group text, published_at timestamptz, attempt int)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
-- Index look-ups whatever the statistics say: the catalog tables start empty
-- and a session's cached plans outlive their growth (a plan made while
-- fanout.lease was empty scanned every lease on every read). The disabled
-- paths' costs must not trigger JIT compilation either.
SET enable_seqscan = off
SET jit = off
AS $fn$
#variable_conflict use_column
DECLARE
    p_topic     ALIAS FOR $1;
    p_group     ALIAS FOR $2;
    p_consumer  ALIAS FOR $3;
    p_max       ALIAS FOR $4;
    p_lease     ALIAS FOR $5;
    p_max_bytes ALIAS FOR $6;
    v_t         fanout.topic;
    v_g         fanout.consumer_group;
    v_now       timestamptz := clock_timestamp();
    v_ids       bigint[] := '{}';
    v_txids     xid8[] := '{}';
    v_att       int[] := '{}';
    v_left      int;
    v_lease_id  bigint;
    v_w         record;
    v_moved     boolean := false;
    v_hint      text;
    r           record;
    v_take      record;
    v_dead_ids  bigint[];
BEGIN
    PERFORM fanout._enter($1, 'consume');
    IF p_max IS NULL OR p_max < 1 OR p_max > 10000 THEN
        RAISE EXCEPTION 'max_messages must be between 1 and 10000, got %', coalesce(p_max::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_lease IS NULL OR p_lease <= interval '0' OR p_lease > interval '24 hours' THEN
        RAISE EXCEPTION 'lease must be a positive interval of at most 24 hours, got %', coalesce(p_lease::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_max_bytes IS NULL OR p_max_bytes < 1 OR p_max_bytes > 536870912 THEN
        RAISE EXCEPTION 'max_bytes must be between 1 and 536870912, got %', coalesce(p_max_bytes::text, 'NULL')
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_consumer IS NOT NULL THEN
        p_consumer := fanout._check_name('consumer', p_consumer);  -- NFC, as heartbeat stores it
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'fanout.read must run in READ COMMITTED, not %', upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'PGQ09';
    END IF;
    v_t := fanout._topic(p_topic);
    IF $8 IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM fanout.lease l JOIN fanout.consumer_group g ON g.group_id = l.group_id
                   WHERE l.slot_id = $8 >> 32
                     AND (g.topic_id <> v_t.topic_id
                          OR g.group_name IS DISTINCT FROM CASE WHEN v_t.semantics = 'pubsub' THEN p_group END)) THEN
            RAISE EXCEPTION 'ack => % is a lease of another topic or group than %/%', $8, p_topic,
                coalesce(p_group, '') USING ERRCODE = 'PGQ03';
        END IF;
        IF v_t.partitions IS NULL THEN
            -- The group row before the lease's, as the read below and seek,
            -- pause and unsubscribe (fanout._release_holds) take them: acking
            -- first, then queueing for the group row behind a seek that
            -- waits for the lease, was a deadlock.
            PERFORM 1 FROM fanout.consumer_group g
            WHERE g.topic_id = v_t.topic_id
              AND g.group_name IS NOT DISTINCT FROM CASE WHEN v_t.semantics = 'pubsub' THEN fanout._nfc(p_group) END
            FOR NO KEY UPDATE;
        END IF;
        PERFORM fanout.ack($8);
    END IF;
    IF v_t.partitions IS NOT NULL THEN
        -- Partitioned topic: per-partition cursors and assignment.
        RETURN QUERY SELECT * FROM fanout._kpart_read(v_t, p_group, p_consumer, p_max, p_lease, p_max_bytes,
                                                      $7, v_now);
        RETURN;
    ELSIF $7 IS NOT NULL THEN
        RAISE EXCEPTION 'topic % is not partitioned; read(..., partition => k) needs a partitioned topic',
            quote_literal(p_topic) USING ERRCODE = 'PGQ03';
    END IF;
    -- Only a session whose last read of this group found nothing peeks first
    -- (a busy consumer would pay for the peek on every page).
    v_hint := fanout._idle_key(v_t.topic_id, CASE WHEN v_t.semantics = 'pubsub' THEN p_group END);
    IF fanout._idle_hint(v_hint) AND fanout._group_idle(v_t, p_group, v_now) THEN
        -- Nothing to hand out: no lock, no write.
        IF p_consumer IS NOT NULL THEN
            PERFORM fanout._touch_member(
                (SELECT g.group_id FROM fanout.consumer_group g
                 WHERE g.topic_id = v_t.topic_id
                   AND g.group_name IS NOT DISTINCT FROM CASE WHEN v_t.semantics = 'pubsub' THEN p_group END),
                p_consumer, v_now, true);
        END IF;
        RETURN;
    END IF;
    v_g := fanout._lock_group(v_t, p_group, true);
    IF v_g.status <> 'active' THEN
        RETURN;  -- paused: keeps its position, receives nothing
    END IF;
    IF v_g.bit_no IS NOT NULL
       AND EXISTS (SELECT 1 FROM fanout.bitmap_job j
                   WHERE j.group_id = v_g.group_id AND j.kind = 'backfill'
                     AND j.status IN ('not_started', 'in_progress')) THEN
        RETURN;  -- reference mode: a group reads once its backfill has set its bits
    END IF;
    v_left := p_max;

    -- 1. Take over what expired leases left un-acked.
    FOR r IN
        SELECT l.lease_id, l.msg_ids, l.msg_txids, l.attempts, l.settled, l.reclaimed
        FROM fanout.lease l
        WHERE l.group_id = v_g.group_id AND l.open_count > 0 AND l.expires_at <= v_now
        ORDER BY l.expires_at, l.lease_id
        LIMIT p_max
        FOR UPDATE SKIP LOCKED
    LOOP
        EXIT WHEN v_left = 0;
        SELECT array_agg(u.id ORDER BY u.ord) FILTER (WHERE u.att < v_t.max_attempts) AS ids,
               array_agg(u.tx ORDER BY u.ord) FILTER (WHERE u.att < v_t.max_attempts) AS txids,
               array_agg(u.att + 1 ORDER BY u.ord) FILTER (WHERE u.att < v_t.max_attempts) AS atts,
               array_agg(u.id ORDER BY u.ord) FILTER (WHERE u.att >= v_t.max_attempts) AS dead_ids,
               array_agg(u.tx ORDER BY u.ord) FILTER (WHERE u.att >= v_t.max_attempts) AS dead_txids,
               array_agg(u.att ORDER BY u.ord) FILTER (WHERE u.att >= v_t.max_attempts) AS dead_atts,
               array_agg(u.id ORDER BY u.ord) AS all_ids
        INTO v_take
        FROM (SELECT o.id, o.tx, o.att, o.ord
              FROM unnest(r.msg_ids, r.msg_txids, r.attempts) WITH ORDINALITY AS o(id, tx, att, ord)
              WHERE o.id <> ALL (r.settled) AND o.id <> ALL (r.reclaimed)
              ORDER BY o.ord
              LIMIT v_left) u;
        IF v_take.dead_ids IS NOT NULL THEN
            PERFORM fanout._dead_letter(v_g.group_id, v_t.data_table, v_take.dead_ids, v_take.dead_txids,
                                        v_take.dead_atts,
                                        format('lease %s expired on delivery attempt %s of %s',
                                               r.lease_id, v_t.max_attempts, v_t.max_attempts));
        END IF;
        IF v_take.ids IS NOT NULL THEN
            v_ids := v_ids || v_take.ids;
            v_txids := v_txids || v_take.txids;
            v_att := v_att || v_take.atts;
            v_left := v_left - cardinality(v_take.ids);
        END IF;
        PERFORM fanout._lease_settle(r.lease_id, v_take.all_ids, true, true, v_now);
    END LOOP;

    -- Sequence-ordered topics: acks since the last read release waiters.
    IF v_t.sequence_ordering THEN
        PERFORM fanout._sequence_advance(v_g.group_id, v_now);
    END IF;

    -- 2. Due retries.
    IF v_left > 0 THEN
        WITH due AS (
            DELETE FROM fanout.retry rt
            WHERE rt.group_id = v_g.group_id
              AND rt.message_id IN (SELECT d.message_id FROM fanout.retry d
                                    WHERE d.group_id = v_g.group_id AND d.not_before <= v_now
                                    ORDER BY d.not_before, d.message_id LIMIT v_left)
            RETURNING rt.message_id, rt.txid, rt.attempt, rt.not_before)
        SELECT array_agg(due.message_id ORDER BY due.not_before, due.message_id) AS ids,
               array_agg(due.txid ORDER BY due.not_before, due.message_id) AS txids,
               array_agg(due.attempt + 1 ORDER BY due.not_before, due.message_id) AS atts
        INTO v_take FROM due;
        IF v_take.ids IS NOT NULL THEN
            v_ids := v_ids || v_take.ids;
            v_txids := v_txids || v_take.txids;
            v_att := v_att || v_take.atts;
            v_left := v_left - cardinality(v_take.ids);
        END IF;
    END IF;

    -- 3. The group's stream.
    IF v_left > 0 THEN
        -- The byte budget is the stream page's (redeliveries above are
        -- bounded by count); its first message always comes.
        IF v_t.prioritized THEN
            SELECT * INTO v_w FROM fanout._window_page_priority(v_g.group_id, v_t.topic_id, v_t.data_table,
                                                                v_left, p_max_bytes);
        ELSE
            -- The group's position as locked above (fanout._lock_group).
            SELECT * INTO v_w FROM fanout._window_scan(v_g.group_id, v_t.topic_id, v_t.data_table, NULL, false,
                                                       v_left, p_max_bytes, v_g.win_lo, v_g.win_hi, v_g.cur_txid,
                                                       v_g.cur_id, v_g.effective_start_id, v_g.bit_no);
        END IF;
        IF v_w.o_changed THEN
            v_moved := true;
            v_g.win_lo := v_w.o_lo;
            v_g.win_hi := v_w.o_hi;
            v_g.cur_txid := v_w.o_cur_txid;
            v_g.cur_id := v_w.o_cur_id;
        END IF;
        IF v_t.sequence_ordering AND cardinality(v_w.o_ids) > 0 THEN
            SELECT * INTO v_w FROM fanout._sequence_gate(v_g.group_id, v_t.data_table, v_w.o_ids, v_w.o_txids);
        END IF;
        IF cardinality(v_w.o_ids) > 0 THEN
            v_ids := v_ids || v_w.o_ids;
            v_txids := v_txids || v_w.o_txids;
            v_att := v_att || array_fill(1, ARRAY[cardinality(v_w.o_ids)]);
        END IF;
    END IF;

    -- One write of the group row: position, delivery count, heartbeat (throttled).
    IF v_moved OR cardinality(v_ids) > 0
       OR v_g.last_heartbeat < v_now - least(v_g.heartbeat_timeout / 10, interval '5 seconds') THEN
        UPDATE fanout.consumer_group g
        SET win_lo = v_g.win_lo, win_hi = v_g.win_hi, cur_txid = v_g.cur_txid, cur_id = v_g.cur_id,
            delivered = g.delivered + cardinality(v_ids),
            last_read_at = v_now, last_heartbeat = v_now, missed_heartbeats = 0
        WHERE g.group_id = v_g.group_id;
    END IF;
    IF p_consumer IS NOT NULL THEN
        PERFORM fanout._touch_member(v_g.group_id, p_consumer, v_now, true);
    END IF;

    PERFORM fanout._set_idle_hint(v_hint, cardinality(v_ids) = 0);
    IF cardinality(v_ids) = 0 THEN
        RETURN;
    END IF;
    v_lease_id := fanout._lease_open(v_g.group_id, p_consumer, v_now, v_now + p_lease, v_ids, v_txids, v_att);

    -- The page's rows, taken-over and retried messages first: one index
    -- look-up each, by the topic's m<id>_rows (a plan cached per session).
    RETURN QUERY EXECUTE format('SELECT * FROM fanout_data.%I($1, $2, $3, $4)', v_t.data_table || '_rows')
        USING v_lease_id, v_ids, v_txids, v_att;
END
$fn$;
