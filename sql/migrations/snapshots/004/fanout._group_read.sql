-- fanout._group_read(p_t, p_group, p_consumer, p_max, p_lease, p_max_bytes,
-- p_now): the page of fanout.read on an unpartitioned topic (called by it
-- after its argument checks and the ack => of the previous page), made under
-- the group row's lock (fanout._lock_group): the expired leases' un-acked
-- messages (fanout._lease_take_over), the due retries (fanout._retries_take),
-- then the group's stream (fanout._window_walk, with the group's filter, by
-- priority unless the topic's priorities were dropped and the window
-- read by priority is done; on a sequence-ordered topic
-- filtered by fanout._sequence_gate), and the group row written once
-- (position, delivered count, throttled heartbeat; what the filter passed
-- over is counted in fanout.group_filter). An idle poll (nothing to
-- hand out, heartbeat fresh) locks and writes nothing (checked first only
-- when the session's previous read of the group was empty).
-- p_settling: the lease id of the caller's previous page, which
-- read(..., ack =>) has acked in full and locked without writing its slot
-- (fanout._ack, p_defer): it is no expired lease to take over, and the new
-- page goes into its slot in the same update (fanout._lease_open); o_folded
-- says it did, else the caller settles it.
-- Returns the page (o_lease_id NULL when there is none) as the lease and its
-- parallel arrays; fanout.read returns its rows. Raises as fanout._lock_group.
-- Tables: fanout.consumer_group, fanout.group_filter, fanout.member, fanout.lease, fanout.retry,
-- fanout.dead_letter, fanout.bitmap_job, fanout_data.m<topic_id>.
CREATE OR REPLACE FUNCTION fanout._group_read(
    p_t fanout.topic, p_group text, p_consumer text, p_max int, p_lease interval, p_max_bytes bigint,
    p_now timestamptz, p_settling bigint DEFAULT NULL,
    OUT o_lease_id bigint, OUT o_ids bigint[], OUT o_txids xid8[], OUT o_atts int[], OUT o_folded boolean)
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_g     fanout.consumer_group;
    v_l     fanout.lease;
    v_w     record;
    v_moved boolean := false;
    v_ids   bigint[];
    v_txids xid8[];
    v_take  record;
    v_hint  text := fanout._idle_key(p_t.topic_id, CASE WHEN p_t.semantics = 'pubsub' THEN p_group END);
    v_filter jsonb;
    v_filtered int := 0;
    v_idle  boolean;   -- the session's hint: its last read of the group found nothing
BEGIN
    o_ids := '{}'; o_txids := '{}'; o_atts := '{}';
    -- Only a session whose last read of this group found nothing peeks first
    -- (a busy consumer would pay for the peek on every page).
    v_idle := fanout._idle_hint(v_hint);
    IF v_idle AND fanout._group_idle(p_t, p_group, p_now) THEN
        -- Nothing to hand out: no lock, no write.
        IF p_consumer IS NOT NULL THEN
            PERFORM fanout._touch_member(
                (SELECT g.group_id FROM fanout.consumer_group g
                 WHERE g.topic_id = p_t.topic_id
                   AND g.group_name IS NOT DISTINCT FROM CASE WHEN p_t.semantics = 'pubsub' THEN p_group END),
                p_consumer, p_now, true);
        END IF;
        RETURN;
    END IF;
    v_g := fanout._lock_group(p_t, p_group, true);
    IF v_g.status <> 'active' THEN
        RETURN;  -- paused: keeps its position, receives nothing
    END IF;
    IF v_g.bit_no IS NOT NULL
       AND EXISTS (SELECT 1 FROM fanout.bitmap_job j
                   WHERE j.group_id = v_g.group_id AND j.kind = 'backfill'
                     AND j.status IN ('not_started', 'in_progress')) THEN
        RETURN;  -- reference mode: a group reads once its backfill has set its bits
    END IF;

    -- 1. Take over what expired leases left un-acked.
    FOR v_l IN
        SELECT l.* FROM fanout.lease l
        WHERE l.group_id = v_g.group_id AND l.open_count > 0 AND l.expires_at <= p_now
          AND l.slot_id <> coalesce(p_settling >> 32, 0)
        ORDER BY l.expires_at, l.lease_id
        LIMIT p_max
        FOR UPDATE SKIP LOCKED
    LOOP
        EXIT WHEN cardinality(o_ids) >= p_max;
        v_take := fanout._lease_take_over(p_t, v_g.group_id, v_l, p_max - cardinality(o_ids), p_now);
        o_ids := o_ids || v_take.o_ids; o_txids := o_txids || v_take.o_txids; o_atts := o_atts || v_take.o_atts;
    END LOOP;

    -- Sequence-ordered topics: acks since the last read release waiters.
    IF p_t.sequence_ordering THEN
        PERFORM fanout._sequence_advance(v_g.group_id, p_now);
    END IF;

    -- 2. Due retries.
    IF cardinality(o_ids) < p_max THEN
        v_take := fanout._retries_take(p_t, v_g, NULL, p_max - cardinality(o_ids), p_now);
        o_ids := o_ids || v_take.o_ids; o_txids := o_txids || v_take.o_txids; o_atts := o_atts || v_take.o_atts;
    END IF;

    -- 3. The group's stream. The byte budget is the stream page's
    -- (redeliveries above are bounded by count); its first message always comes.
    IF cardinality(o_ids) < p_max THEN
        IF p_t.has_filters THEN  -- the group's subscription filter (fanout.set_filter)
            SELECT f.filter INTO v_filter FROM fanout.group_filter f WHERE f.group_id = v_g.group_id;
        END IF;
        SELECT * INTO v_w FROM fanout._window_walk(v_g.group_id, p_t.topic_id, p_t.data_table, NULL, false,
                                                   p_t.prioritized AND (p_t.priorities_dropped_at IS NULL
                                                                        OR v_g.prio_level IS NOT NULL),
                                                   p_max - cardinality(o_ids), p_max_bytes,
                                                   v_g.win_lo, v_g.win_hi, v_g.cur_txid, v_g.cur_id,
                                                   v_g.effective_start_id, v_g.bit_no,
                                                   v_g.prio_level, v_g.prio_txid, v_g.prio_id,
                                                   p_filter => v_filter,
                                                   p_prio_ends => p_t.priorities_dropped_at IS NOT NULL);
        v_moved := v_w.o_changed;
        v_filtered := v_w.o_filtered;
        v_ids := v_w.o_ids;
        v_txids := v_w.o_txids;
        IF v_moved THEN
            v_g.win_lo := v_w.o_lo; v_g.win_hi := v_w.o_hi; v_g.cur_txid := v_w.o_cur_txid; v_g.cur_id := v_w.o_cur_id;
            v_g.prio_level := v_w.o_plvl; v_g.prio_txid := v_w.o_ptx; v_g.prio_id := v_w.o_pid;
        END IF;
        IF p_t.sequence_ordering AND cardinality(v_ids) > 0 THEN
            SELECT g.o_ids, g.o_txids INTO v_ids, v_txids
            FROM fanout._sequence_gate(v_g.group_id, p_t.data_table, v_ids, v_txids) g;
        END IF;
        o_ids := o_ids || v_ids; o_txids := o_txids || v_txids;
        o_atts := o_atts || array_fill(1, ARRAY[coalesce(cardinality(v_ids), 0)]);
    END IF;

    -- One write of the group row: position, delivery count, heartbeat (throttled).
    IF v_moved OR cardinality(o_ids) > 0
       OR v_g.last_heartbeat < p_now - least(v_g.heartbeat_timeout / 10, interval '5 seconds') THEN
        UPDATE fanout.consumer_group g
        SET win_lo = v_g.win_lo, win_hi = v_g.win_hi, cur_txid = v_g.cur_txid, cur_id = v_g.cur_id,
            prio_level = v_g.prio_level, prio_txid = v_g.prio_txid, prio_id = v_g.prio_id,
            delivered = g.delivered + cardinality(o_ids),
            last_read_at = p_now, last_heartbeat = p_now, missed_heartbeats = 0
        WHERE g.group_id = v_g.group_id;
    END IF;
    IF v_filtered > 0 THEN
        UPDATE fanout.group_filter f SET filtered = f.filtered + v_filtered WHERE f.group_id = v_g.group_id;
    END IF;
    IF p_consumer IS NOT NULL THEN
        PERFORM fanout._touch_member(v_g.group_id, p_consumer, p_now, true);
    END IF;
    IF v_idle OR cardinality(o_ids) = 0 THEN  -- else the hint stays as it is
        PERFORM fanout._set_idle_hint(v_hint, cardinality(o_ids) = 0);
    END IF;
    IF cardinality(o_ids) > 0 THEN
        o_lease_id := fanout._lease_open(v_g.group_id, p_consumer, p_now, p_now + p_lease, o_ids, o_txids, o_atts,
                                         p_settling => p_settling);
        o_folded := (o_lease_id >> 32) = (p_settling >> 32);
    END IF;
END
$fn$;
