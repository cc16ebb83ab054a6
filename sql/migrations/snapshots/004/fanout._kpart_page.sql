-- fanout._kpart_page(p_t, p_g, p_k, p_consumer, p_max, p_lease, p_max_bytes,
-- p_now): the next page of one key partition p_k of group p_g, whose row
-- the caller (fanout._kpart_claim) holds. A partition is served only when its
-- previous page (p_k.lease_id) is settled, or expired (then that page's
-- unsettled messages are the next page, taken over whole by
-- fanout._lease_take_over: fencing as for any lease), and no nacked message
-- of it waits for its retry time (head-of-line). Due retries of the partition
-- (fanout._retries_take) come before its stream, and an expired page joins
-- them when there are any, so that the page is in commit order. The stream
-- page is fanout._window_walk on the partition's position (by priority level
-- once the topic has priorities, until they are dropped; with the group's
-- filter). Writes the partition's position, its delivered and filtered
-- counts and its page (lease_id) back.
-- Returns the page as fanout._group_read does (o_lease_id NULL: nothing to
-- hand out from this partition now).
-- Tables: fanout.kpart, fanout.group_filter, fanout.lease, fanout.retry, fanout.dead_letter,
-- fanout.event_log, fanout_data.m<topic_id>.
CREATE OR REPLACE FUNCTION fanout._kpart_page(
    p_t fanout.topic, p_g fanout.consumer_group, p_k fanout.kpart, p_consumer text, p_max int,
    p_lease interval, p_max_bytes bigint, p_now timestamptz,
    OUT o_lease_id bigint, OUT o_ids bigint[], OUT o_txids xid8[], OUT o_atts int[])
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_l       fanout.lease;
    v_w       record;
    v_take    record;
    -- Whether the group has any retry row (nacked, delayed or replayed
    -- messages): without any, a page read touches neither the retry
    -- look-ups below nor their three indexes (relation locks beyond
    -- PostgreSQL's 16 fast-path slots per transaction go through the shared
    -- lock table, on one partition per relation for every member of a storm).
    v_retries boolean;
    v_filter  jsonb;
BEGIN
    IF p_k.lease_id IS NOT NULL THEN
        SELECT * INTO v_l FROM fanout.lease l
        WHERE l.slot_id = p_k.lease_id >> 32 AND l.lease_id = p_k.lease_id AND l.open_count > 0;
        -- The previous page is not settled and its lease runs: not yet.
        IF v_l.lease_id IS NOT NULL AND v_l.expires_at > p_now THEN
            RETURN;
        END IF;
        IF v_l.lease_id IS NOT NULL THEN
            -- Expired: the lease row decides. A late ack settling it (maybe in
            -- a long business transaction) holds it: skip the partition this
            -- time rather than wait.
            SELECT * INTO v_l FROM fanout.lease l
            WHERE l.slot_id = p_k.lease_id >> 32 AND l.lease_id = p_k.lease_id FOR UPDATE SKIP LOCKED;
            IF NOT FOUND OR (v_l.open_count > 0 AND v_l.expires_at > p_now) THEN
                RETURN;
            END IF;
        END IF;
    END IF;
    -- A nacked message waits for its retry time: the partition waits too.
    -- (Only when the group has retry rows at all: one probe, on one index, in
    -- the common case of none. Probed after the lease check: a nack settles
    -- its lease and inserts its retry row in one transaction, so a probe that
    -- comes after a lease check which saw the page settled sees the row.)
    v_retries := EXISTS (SELECT 1 FROM fanout.retry r WHERE r.group_id = p_g.group_id);
    IF v_retries THEN  -- (a statement of its own: its plan opens the index even when not run)
        IF EXISTS (SELECT 1 FROM fanout.retry r
                   WHERE r.group_id = p_g.group_id AND r.kpart = p_k.kpart
                     AND r.attempt > 0 AND r.not_before > p_now) THEN
            RETURN;
        END IF;
    END IF;

    -- 1. The expired page, whole (its lease can no longer settle it).
    IF v_l.lease_id IS NOT NULL AND v_l.open_count > 0 THEN
        v_take := fanout._lease_take_over(p_t, p_g.group_id, v_l, NULL, p_now);
        o_ids := v_take.o_ids; o_txids := v_take.o_txids; o_atts := v_take.o_atts;
        -- Due retries of the partition too (a message of this page or an
        -- earlier one nacked, then the lease ran out): the page's messages
        -- join them, and the page is made from the retries in commit order
        -- (step 2), so a nacked message does not come after the messages that
        -- followed it.
        IF v_retries AND cardinality(o_ids) > 0
           AND EXISTS (SELECT 1 FROM fanout.retry r
                       WHERE r.group_id = p_g.group_id AND (r.kpart = p_k.kpart OR r.kpart IS NULL)
                         AND r.not_before <= p_now) THEN
            INSERT INTO fanout.retry (group_id, message_id, txid, attempt, not_before, kpart)
            SELECT p_g.group_id, u.id, u.tx, u.att - 1, p_now, p_k.kpart
            FROM unnest(o_ids, o_txids, o_atts) AS u(id, tx, att)
            ON CONFLICT DO NOTHING;
            o_ids := NULL;
        END IF;
    END IF;

    -- 2. Due retries of the partition (and any without a partition, from
    --    replay), in commit order.
    IF coalesce(cardinality(o_ids), 0) = 0 AND v_retries THEN
        SELECT * INTO o_ids, o_txids, o_atts FROM fanout._retries_take(p_t, p_g, p_k.kpart, p_max, p_now);
    END IF;

    -- 3. The partition's stream.
    IF coalesce(cardinality(o_ids), 0) = 0 THEN
        IF p_t.has_filters THEN  -- the group's subscription filter (fanout.set_filter)
            SELECT f.filter INTO v_filter FROM fanout.group_filter f WHERE f.group_id = p_g.group_id;
        END IF;
        SELECT * INTO v_w FROM fanout._window_walk(p_g.group_id, p_t.topic_id, p_t.data_table, p_k.kpart,
                                                   p_t.whole_transactions,
                                                   p_t.prioritized AND (p_t.priorities_dropped_at IS NULL
                                                                        OR p_k.prio_level IS NOT NULL),
                                                   p_max, p_max_bytes,
                                                   p_k.win_lo, p_k.win_hi, p_k.cur_txid, p_k.cur_id,
                                                   p_g.effective_start_id, p_g.bit_no,
                                                   p_k.prio_level, p_k.prio_txid, p_k.prio_id,
                                                   p_filter => v_filter,
                                                   p_prio_ends => p_t.priorities_dropped_at IS NOT NULL);
        o_ids := v_w.o_ids; o_txids := v_w.o_txids;
        o_atts := array_fill(1, ARRAY[cardinality(v_w.o_ids)]);
        IF v_w.o_changed THEN
            p_k.win_lo := v_w.o_lo; p_k.win_hi := v_w.o_hi; p_k.cur_txid := v_w.o_cur_txid;
            p_k.cur_id := v_w.o_cur_id; p_k.prio_level := v_w.o_plvl; p_k.prio_txid := v_w.o_ptx;
            p_k.prio_id := v_w.o_pid; p_k.filtered := p_k.filtered + v_w.o_filtered;
        END IF;
        IF cardinality(o_ids) = 0 THEN
            IF v_w.o_changed THEN
                UPDATE fanout.kpart k
                SET win_lo = p_k.win_lo, win_hi = p_k.win_hi, cur_txid = p_k.cur_txid, cur_id = p_k.cur_id,
                    prio_level = p_k.prio_level, prio_txid = p_k.prio_txid, prio_id = p_k.prio_id,
                    filtered = p_k.filtered
                WHERE k.group_id = p_k.group_id AND k.kpart = p_k.kpart;
            END IF;
            RETURN;
        END IF;
    END IF;

    -- Stamped when handed out (not when the read began): the previous page
    -- of the partition was settled or had expired before this.
    o_lease_id := fanout._lease_open(p_g.group_id, p_consumer, clock_timestamp(), clock_timestamp() + p_lease,
                                     o_ids, o_txids, o_atts, p_k.kpart, p_k.generation, p_k.lease_id >> 32);
    UPDATE fanout.kpart k
    SET win_lo = p_k.win_lo, win_hi = p_k.win_hi, cur_txid = p_k.cur_txid, cur_id = p_k.cur_id,
        prio_level = p_k.prio_level, prio_txid = p_k.prio_txid, prio_id = p_k.prio_id, filtered = p_k.filtered,
        lease_id = o_lease_id, delivered = k.delivered + cardinality(o_ids), last_read_at = p_now
    WHERE k.group_id = p_k.group_id AND k.kpart = p_k.kpart;
END
$fn$;
