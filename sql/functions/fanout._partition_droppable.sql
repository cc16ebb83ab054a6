-- fanout._partition_droppable(p_t, p_part, p_now): whether a closed partition
-- may go under the retention rules. Offset mode: it closed more than
-- retention ago (or zero_subscription_retention ago when no group of a pubsub
-- topic pins storage) and every pinning group has passed it. Reference mode:
-- no transaction that may have rows in it waits for its stamps to be
-- reconciled, no backfill still has to stamp it, every message in it is COMPLETED (or unclaimed and past
-- zero_subscription_retention) and it closed more than retention ago. A
-- topic switched from offset to reference (completion_switch_id): the
-- reference rule for the rows from the switch id on, the offset rule for
-- a partition with rows below it (docs/completion-switch.md).
-- Reads fanout.consumer_group, fanout.lease, fanout.retry, fanout.seq_wait, the partition (and
-- in reference mode its completion partition m<topic_id>_done_p<n>).
CREATE OR REPLACE FUNCTION fanout._partition_droppable(p_t fanout.topic, p_part fanout.partition, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    g           fanout.consumer_group;
    v_pinning   int := 0;
    v_pending   boolean;
    v_unclaimed boolean;
    v_ids       bigint[];
    v_reqs      bigint[];
    v_switch    bigint;
BEGIN
    -- A topic switched from offset to reference completion: rows below its
    -- switch id carry no bits and go by the offset rule (below), rows from
    -- it on by the reference rule; a partition holding both passes both.
    v_switch := CASE WHEN p_t.completion = 'reference' THEN p_t.completion_switch_id END;
    IF p_t.completion = 'reference' AND p_part.hi_id > coalesce(v_switch, 0) THEN
        -- A transaction whose stamps wait to be reconciled may have rows
        -- here that only look COMPLETED (fanout._reconcile_stamps).
        IF EXISTS (SELECT 1 FROM fanout.stamp_pending s
                   WHERE s.topic_id = p_t.topic_id
                     AND (p_part.txid_bound IS NULL OR s.txid < p_part.txid_bound)) THEN
            RETURN false;
        END IF;
        -- A backfill still to set its group's bits from here on: the history
        -- it promised (e.g. unclaimed messages, scope all_retained) stays.
        IF EXISTS (SELECT 1 FROM fanout.bitmap_job j JOIN fanout.consumer_group cg ON cg.group_id = j.group_id
                   WHERE cg.topic_id = p_t.topic_id AND j.kind = 'backfill'
                     AND j.status IN ('not_started', 'in_progress') AND j.from_id < p_part.hi_id) THEN
            RETURN false;
        END IF;
        IF p_now - p_part.closed_at < p_t.retention THEN
            RETURN false;
        END IF;
        -- A lagging group has usually not acked the newest messages: look at
        -- those first (index look-ups), so that a partition kept by a
        -- lagging group costs a probe per cleanup round, not a pass.
        EXECUTE format('SELECT array_agg(m.id), array_agg(m.required_groups)
                        FROM (SELECT id, required_groups FROM fanout_data.%I WHERE id >= $1
                              ORDER BY id DESC LIMIT 100) m',
                       p_part.relname) INTO v_ids, v_reqs USING coalesce(v_switch, 0);
        IF EXISTS (SELECT 1 FROM unnest(v_ids, v_reqs) AS x(id, req)
                   LEFT JOIN fanout._done_bits(p_t.data_table, v_ids) d ON d.id = x.id
                   WHERE (x.req & ~coalesce(d.bits, 0)) <> 0) THEN
            RETURN false;
        END IF;
        -- Every message COMPLETED; unclaimed ones (no group required them)
        -- stay for zero_subscription_retention.
        -- (done bits from the partition's completion rows, one hash
        -- aggregate: fanout._complete_bits).
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM fanout_data.%1$I m
                                       LEFT JOIN (SELECT u.id, bit_or(1::bigint << d.bit) AS bits
                                                  FROM fanout_data.%2$I d CROSS JOIN LATERAL unnest(d.ids) AS u(id)
                                                  GROUP BY u.id) c ON c.id = m.id
                                       WHERE m.id >= $1 AND (m.required_groups & ~coalesce(c.bits, 0)) <> 0),
                               EXISTS (SELECT 1 FROM fanout_data.%1$I m WHERE m.id >= $1 AND m.required_groups = 0)',
                       p_part.relname, p_t.data_table || '_done_p' || p_part.part_no)
            INTO v_pending, v_unclaimed USING coalesce(v_switch, 0);
        IF v_pending OR p_now - p_part.closed_at < p_t.retention
           OR v_unclaimed AND p_now - p_part.closed_at < p_t.zero_subscription_retention THEN
            RETURN false;
        END IF;
        IF p_part.lo_id >= coalesce(v_switch, 0) THEN
            RETURN true;
        END IF;
        -- The partition the switch fell in: its rows below the switch id too.
    END IF;
    -- One statement over the topic's groups: those whose window starts past
    -- the partition's bound pass without a look at the data; the others are
    -- asked one by one, most lagging first, and the first that has not
    -- passed ends the check (so a lagging crowd costs one look, not one each).
    FOR g IN
        SELECT * FROM fanout.consumer_group cg
        WHERE cg.topic_id = p_t.topic_id AND fanout._group_pins(cg, p_t, p_now)
          AND (p_part.txid_bound IS NULL OR pg_snapshot_xmin(cg.win_lo) < p_part.txid_bound
               OR fanout._group_holds_in(cg.group_id, p_part))
        ORDER BY pg_snapshot_xmin(cg.win_lo), cg.group_id
    LOOP
        IF NOT fanout._group_passed(g, p_part) THEN
            RETURN false;
        END IF;
    END LOOP;
    SELECT count(*) INTO v_pinning
    FROM fanout.consumer_group cg WHERE cg.topic_id = p_t.topic_id AND fanout._group_pins(cg, p_t, p_now);
    RETURN p_now - p_part.closed_at >= CASE WHEN v_pinning = 0 AND p_t.semantics = 'pubsub'
                                            THEN p_t.zero_subscription_retention ELSE p_t.retention END;
END
$fn$;
