-- fanout._kpart_read(p_t, p_group, p_consumer, p_max, p_lease, p_max_bytes,
-- p_partition, p_now): fanout.read for a partitioned topic (called by it after
-- its argument checks). Never locks the group row (only a throttled
-- heartbeat write every few seconds): members of one group claim on their own
-- key partitions' rows (fanout.kpart), so claims on different partitions
-- never wait for each other.
--   * Mode: p_partition NULL = automatic assignment (p_consumer required),
--     else an explicit read of that partition (fanout._kpart_mode refuses
--     mixing the two in one group, PGQ24).
--   * Assignment (fanout._kpart_assign): the caller gets its share of the
--     partitions over the live members, incrementally.
--   * One page per partition: a partition is served only when its previous
--     page (fanout.kpart.lease_id) is settled, or expired (then that page's
--     unsettled messages are the next page, taken over whole: fencing as
--     for any lease), and no nacked message of it waits for its retry time
--     (head-of-line). Due retries of the partition come before its stream
--     (and an expired page joins them when there are any, so that the page
--     is in commit order; whole_transactions holds for them too);
--     the stream page is fanout._window_scan on the partition's cursor. One read returns one page of one
--     partition (the least recently served ready one it owns).
-- Returns rows as fanout.read. Raises: PGQ03 (partition out of range,
-- consumer missing in automatic mode), PGQ13, PGQ14, PGQ16, PGQ22, PGQ24.
-- Tables: fanout.consumer_group, fanout.kpart, fanout.member, fanout.lease,
-- fanout.retry, fanout.dead_letter, fanout.event_log, fanout_data.m<topic_id>.
CREATE OR REPLACE FUNCTION fanout._kpart_read(
    p_t fanout.topic, p_group text, p_consumer text, p_max int, p_lease interval, p_max_bytes bigint,
    p_partition int, p_now timestamptz)
RETURNS TABLE(lease_id bigint, message_id bigint, payload jsonb, headers jsonb,
              message_group text, published_at timestamptz, attempt int)
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
-- One generic plan per statement and session (the page functions do the
-- same): a few statements here (the lease slot's update, the member count
-- of fanout._kpart_assign) were planned anew on every read, and every
-- statement on a backend's first five reads; in a member storm most page
-- reads came early in their backend's life.
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
    v_g        fanout.consumer_group;
    v_k        fanout.kpart;
    v_l        fanout.lease;
    v_ids      bigint[];
    v_txids    xid8[];
    v_att      int[];
    v_nw       int;
    v_w        record;
    v_take     record;
    v_lease_id bigint;
    v_parts    int[];
    v_last     xid8;                     -- whole_transactions: txid of a retry page's last message
    c_cap      constant int := 10000;    -- whole_transactions: hard cap of a page (fanout._window_scan)
    -- Whether the group has any retry row (nacked, delayed or replayed
    -- messages): without any, a page read touches
    -- neither the retry look-ups below nor their three indexes (relation
    -- locks beyond PostgreSQL's 16 fast-path slots per transaction go
    -- through the shared lock table, on one partition per relation for
    -- every member of a storm).
    v_retries  boolean;
BEGIN
    IF p_t.semantics = 'queue' THEN
        SELECT * INTO STRICT v_g FROM fanout.consumer_group g
        WHERE g.topic_id = p_t.topic_id AND g.group_name IS NULL;
    ELSE
        IF p_group IS NULL THEN
            RAISE EXCEPTION 'group_name is required on pubsub topic %', quote_literal(p_t.topic)
                USING ERRCODE = 'PGQ13';
        END IF;
        SELECT * INTO v_g FROM fanout.consumer_group g
        WHERE g.topic_id = p_t.topic_id AND g.group_name = fanout._nfc(p_group);
        IF NOT FOUND OR v_g.status IN ('cancelled', 'dead') THEN
            v_g := fanout._lock_group(p_t, p_group, true);  -- raises, or resurrects a dead group
        END IF;
    END IF;
    IF p_partition IS NOT NULL AND (p_partition < 0 OR p_partition >= p_t.partitions) THEN
        RAISE EXCEPTION 'partition must be between 0 and % (topic % has % partitions), got %',
            p_t.partitions - 1, quote_literal(p_t.topic), p_t.partitions, p_partition USING ERRCODE = 'PGQ03';
    END IF;
    IF p_partition IS NULL AND p_consumer IS NULL THEN
        RAISE EXCEPTION 'consumer is required to read partitioned topic % (partitions are assigned to named members)',
            quote_literal(p_t.topic)
            USING ERRCODE = 'PGQ03', HINT = 'pass consumer => a stable member name, or read(..., partition => k)';
    END IF;
    IF p_consumer IS NOT NULL THEN
        -- A quarter of the liveness window of fanout._kpart_assign: a live
        -- member stays live, and an idle one writes rarely.
        PERFORM fanout._touch_member(v_g.group_id, p_consumer, p_now, true,
                                     greatest(interval '1 second',
                                              least(v_g.heartbeat_timeout, interval '30 seconds') / 4));
    END IF;
    IF v_g.status <> 'active' THEN
        RETURN;  -- paused
    END IF;
    IF v_g.bit_no IS NOT NULL THEN  -- (nested: the statement locks bitmap_job even when it short-cuts)
        IF EXISTS (SELECT 1 FROM fanout.bitmap_job j
                   WHERE j.group_id = v_g.group_id AND j.kind = 'backfill'
                     AND j.status IN ('not_started', 'in_progress')) THEN
            RETURN;
        END IF;
    END IF;
    -- The mode: NULL is automatic (fanout._kpart_mode is only for going
    -- explicit, or an automatic read of an explicit group).
    IF (p_partition IS NULL AND v_g.kpart_mode = 'explicit')
       OR (p_partition IS NOT NULL AND v_g.kpart_mode IS DISTINCT FROM 'explicit') THEN
        PERFORM fanout._kpart_mode(p_t, v_g.group_id, p_partition IS NOT NULL, p_now);
    END IF;
    -- The group's sign of life, throttled like fanout.read's (and its
    -- delivered count, summed over its partitions).
    IF v_g.last_heartbeat < p_now - least(v_g.heartbeat_timeout / 10, interval '5 seconds') THEN
        -- One member writes it; the others skip it rather than queue behind
        -- that member's read transaction.
        UPDATE fanout.consumer_group g
        SET last_heartbeat = p_now, last_read_at = p_now, missed_heartbeats = 0,
            delivered = (SELECT coalesce(sum(k.delivered), 0) FROM fanout.kpart k WHERE k.group_id = g.group_id)
        WHERE g.group_id = (SELECT x.group_id FROM fanout.consumer_group x
                            WHERE x.group_id = v_g.group_id
                              AND x.last_heartbeat < p_now - least(x.heartbeat_timeout / 10, interval '5 seconds')
                            FOR NO KEY UPDATE SKIP LOCKED);
    END IF;
    -- The partition cursors exist from the group's creation (subscribe,
    -- create_topic for a queue, alter_topic raising P): a read never inserts.
    IF p_partition IS NOT NULL THEN
        v_parts := ARRAY[p_partition];
    ELSE
        v_parts := fanout._kpart_assign(p_t, v_g, p_consumer, p_now);
        IF cardinality(v_parts) = 0 THEN
            RETURN;  -- owns nothing (more members than partitions, or waiting for a release)
        END IF;
    END IF;

    FOR v_k IN
        SELECT k.* FROM fanout.kpart k
        WHERE k.group_id = v_g.group_id AND k.kpart = ANY (v_parts)
        ORDER BY k.last_read_at NULLS FIRST, k.kpart
    LOOP
        -- Explicit readers of one partition take turns; automatic ones skip
        -- a partition another session of the same member is serving.
        IF p_partition IS NOT NULL THEN
            SELECT * INTO v_k FROM fanout.kpart k
            WHERE k.group_id = v_k.group_id AND k.kpart = v_k.kpart FOR UPDATE;
            -- The attempt counts as use of explicit mode, also when it hands
            -- nothing out (fanout._kpart_mode refuses automatic reads
            -- meanwhile); written at most once a second per partition.
            IF v_k.last_read_at IS NULL OR v_k.last_read_at < p_now - interval '1 second' THEN
                UPDATE fanout.kpart k SET last_read_at = p_now
                WHERE k.group_id = v_k.group_id AND k.kpart = v_k.kpart;
            END IF;
        ELSE
            SELECT * INTO v_k FROM fanout.kpart k
            WHERE k.group_id = v_k.group_id AND k.kpart = v_k.kpart AND k.owner = p_consumer
            FOR UPDATE SKIP LOCKED;
            CONTINUE WHEN NOT FOUND;
        END IF;
        -- The group again, now that the partition is held: a seek or an
        -- unsubscribe that held it (fanout._release_holds) may have committed
        -- while this read waited, after the look above (a new status, a new
        -- start for the partition's new cursor).
        SELECT * INTO v_g FROM fanout.consumer_group g WHERE g.group_id = v_g.group_id;
        IF v_g.status <> 'active' THEN
            RETURN;
        END IF;
        v_l := NULL;
        IF v_k.lease_id IS NOT NULL THEN
            SELECT * INTO v_l FROM fanout.lease l
            WHERE l.slot_id = v_k.lease_id >> 32 AND l.lease_id = v_k.lease_id AND l.open_count > 0;
            -- The previous page is not settled and its lease runs: not yet.
            CONTINUE WHEN v_l.lease_id IS NOT NULL AND v_l.expires_at > p_now;
            IF v_l.lease_id IS NOT NULL THEN
                -- Expired: the lease row decides. A late ack settling it
                -- (maybe in a long business transaction) holds it: skip the
                -- partition this time rather than wait.
                SELECT * INTO v_l FROM fanout.lease l
                WHERE l.slot_id = v_k.lease_id >> 32 AND l.lease_id = v_k.lease_id FOR UPDATE SKIP LOCKED;
                CONTINUE WHEN NOT FOUND OR (v_l.open_count > 0 AND v_l.expires_at > p_now);
            END IF;
        END IF;
        -- A nacked message waits for its retry time: the partition waits too.
        -- (Only when the group has retry rows at all: one probe, on one
        -- index, in the common case of none; see v_retries. Probed for each
        -- partition, after its lease check: a nack settles its lease and
        -- inserts its retry row in one transaction, so a probe that comes
        -- after a lease check which saw the page settled sees the row.)
        v_retries := EXISTS (SELECT 1 FROM fanout.retry r WHERE r.group_id = v_g.group_id);
        IF v_retries THEN  -- (a statement of its own: its plan opens the index even when not run)
            CONTINUE WHEN EXISTS (SELECT 1 FROM fanout.retry r
                                  WHERE r.group_id = v_g.group_id AND r.kpart = v_k.kpart
                                    AND r.attempt > 0 AND r.not_before > p_now);
        END IF;
        v_ids := '{}';
        v_txids := '{}';
        v_att := '{}';

        -- 1. The expired page, whole (its lease can no longer settle it).
        IF v_l.lease_id IS NOT NULL AND v_l.open_count > 0 THEN
            SELECT array_agg(u.id ORDER BY u.ord) FILTER (WHERE u.att < p_t.max_attempts) AS ids,
                   array_agg(u.tx ORDER BY u.ord) FILTER (WHERE u.att < p_t.max_attempts) AS txids,
                   array_agg(u.att + 1 ORDER BY u.ord) FILTER (WHERE u.att < p_t.max_attempts) AS atts,
                   array_agg(u.id ORDER BY u.ord) FILTER (WHERE u.att >= p_t.max_attempts) AS dead_ids,
                   array_agg(u.tx ORDER BY u.ord) FILTER (WHERE u.att >= p_t.max_attempts) AS dead_txids,
                   array_agg(u.att ORDER BY u.ord) FILTER (WHERE u.att >= p_t.max_attempts) AS dead_atts,
                   array_agg(u.id ORDER BY u.ord) AS all_ids
            INTO v_take
            FROM unnest(v_l.msg_ids, v_l.msg_txids, v_l.attempts) WITH ORDINALITY AS u(id, tx, att, ord)
            WHERE u.id <> ALL (v_l.settled) AND u.id <> ALL (v_l.reclaimed);
            IF v_take.dead_ids IS NOT NULL THEN
                PERFORM fanout._dead_letter(v_g.group_id, p_t.data_table, v_take.dead_ids, v_take.dead_txids,
                                            v_take.dead_atts,
                                            format('lease %s expired on delivery attempt %s of %s',
                                                   v_l.lease_id, p_t.max_attempts, p_t.max_attempts));
            END IF;
            v_ids := coalesce(v_take.ids, '{}');
            v_txids := coalesce(v_take.txids, '{}');
            v_att := coalesce(v_take.atts, '{}');
            PERFORM fanout._lease_settle(v_l.lease_id, v_take.all_ids, true, true, p_now);
            -- Due retries of the partition too (a message of this page or an
            -- earlier one nacked, then the lease ran out): the page's
            -- messages join them, and the page is made from the retries in
            -- commit order (step 2), so a nacked message does not come after
            -- the messages that followed it.
            IF v_retries AND cardinality(v_ids) > 0
               AND EXISTS (SELECT 1 FROM fanout.retry r
                           WHERE r.group_id = v_g.group_id AND (r.kpart = v_k.kpart OR r.kpart IS NULL)
                             AND r.not_before <= p_now) THEN
                INSERT INTO fanout.retry (group_id, message_id, txid, attempt, not_before, kpart)
                SELECT v_g.group_id, u.id, u.tx, u.att - 1, p_now, v_k.kpart
                FROM unnest(v_ids, v_txids, v_att) AS u(id, tx, att)
                ON CONFLICT DO NOTHING;
                v_ids := '{}';
                v_txids := '{}';
                v_att := '{}';
            END IF;
        END IF;

        -- 2. Due retries of the partition (and any without a partition, from
        --    replay), in commit order. With whole_transactions the page
        --    also takes the rest of the last producer transaction's due
        --    retries (up to 10,000 in all, as fanout._window_scan).
        IF cardinality(v_ids) = 0 AND v_retries THEN
            v_last := NULL;
            IF p_t.whole_transactions THEN
                SELECT d.txid INTO v_last FROM fanout.retry d
                WHERE d.group_id = v_g.group_id AND d.not_before <= p_now
                  AND (d.kpart = v_k.kpart OR d.kpart IS NULL)
                ORDER BY d.txid, d.message_id OFFSET p_max - 1 LIMIT 1
                FOR UPDATE SKIP LOCKED;  -- as the pick below
            END IF;
            WITH due AS (
                DELETE FROM fanout.retry rt
                WHERE rt.group_id = v_g.group_id
                  AND rt.message_id IN (SELECT d.message_id FROM fanout.retry d
                                        WHERE d.group_id = v_g.group_id AND d.not_before <= p_now
                                          AND (d.kpart = v_k.kpart OR d.kpart IS NULL)
                                          AND (v_last IS NULL OR d.txid <= v_last)
                                        ORDER BY d.txid, d.message_id
                                        LIMIT CASE WHEN v_last IS NULL THEN p_max ELSE c_cap END
                                        -- A retry without a partition (a replay) that a
                                        -- read of another partition is taking is passed
                                        -- by: picked and then found gone, it left this
                                        -- page empty and the partition's own due retry
                                        -- behind the stream's next message.
                                        FOR UPDATE SKIP LOCKED)
                RETURNING rt.message_id, rt.txid, rt.attempt)
            SELECT array_agg(due.message_id ORDER BY due.txid, due.message_id) AS ids,
                   array_agg(due.txid ORDER BY due.txid, due.message_id) AS txids,
                   array_agg(due.attempt + 1 ORDER BY due.txid, due.message_id) AS atts
            INTO v_take FROM due;
            v_ids := coalesce(v_take.ids, '{}');
            v_txids := coalesce(v_take.txids, '{}');
            v_att := coalesce(v_take.atts, '{}');
            IF v_last IS NOT NULL AND cardinality(v_ids) = c_cap
               AND EXISTS (SELECT 1 FROM fanout.retry d
                           WHERE d.group_id = v_g.group_id AND d.not_before <= p_now
                             AND (d.kpart = v_k.kpart OR d.kpart IS NULL) AND d.txid = v_last) THEN
                INSERT INTO fanout.event_log (topic, group_name, kind, count, detail)
                VALUES (p_t.topic, v_g.group_name, 'transaction_split', c_cap,
                        jsonb_build_object('partition', v_k.kpart, 'txid', v_last::text, 'cap', c_cap,
                                           'last_id', v_ids[c_cap], 'retries', true));
            END IF;
        END IF;
        v_nw := cardinality(v_ids);

        -- 3. The partition's stream.
        IF v_nw = 0 THEN
            SELECT * INTO v_w FROM fanout._window_scan(v_g.group_id, p_t.topic_id, p_t.data_table, v_k.kpart,
                                                       p_t.whole_transactions, p_max, p_max_bytes,
                                                       v_k.win_lo, v_k.win_hi, v_k.cur_txid, v_k.cur_id,
                                                       v_g.effective_start_id, v_g.bit_no);
            IF v_w.o_changed THEN
                v_k.win_lo := v_w.o_lo;
                v_k.win_hi := v_w.o_hi;
                v_k.cur_txid := v_w.o_cur_txid;
                v_k.cur_id := v_w.o_cur_id;
            END IF;
            IF cardinality(v_w.o_ids) > 0 THEN
                v_ids := v_w.o_ids;
                v_txids := v_w.o_txids;
                v_att := array_fill(1, ARRAY[cardinality(v_w.o_ids)]);
            END IF;
        END IF;

        IF cardinality(v_ids) = 0 THEN
            IF v_w.o_changed THEN
                UPDATE fanout.kpart k
                SET win_lo = v_k.win_lo, win_hi = v_k.win_hi, cur_txid = v_k.cur_txid, cur_id = v_k.cur_id
                WHERE k.group_id = v_k.group_id AND k.kpart = v_k.kpart;
            END IF;
            CONTINUE;
        END IF;

        -- Stamped when handed out (not when the read began): the previous
        -- page of the partition was settled or had expired before this.
        v_lease_id := fanout._lease_open(v_g.group_id, p_consumer, clock_timestamp(), clock_timestamp() + p_lease,
                                         v_ids, v_txids, v_att, v_k.kpart, v_k.generation,
                                         v_k.lease_id >> 32);
        UPDATE fanout.kpart k
        SET win_lo = v_k.win_lo, win_hi = v_k.win_hi, cur_txid = v_k.cur_txid, cur_id = v_k.cur_id,
            lease_id = v_lease_id, delivered = k.delivered + cardinality(v_ids), last_read_at = p_now
        WHERE k.group_id = v_k.group_id AND k.kpart = v_k.kpart;

        RETURN QUERY EXECUTE format('SELECT * FROM fanout_data.%I($1, $2, $3, $4)', p_t.data_table || '_rows')
            USING v_lease_id, v_ids, v_txids, v_att;
        RETURN;  -- one page of one partition per read
    END LOOP;
END
$fn$;
