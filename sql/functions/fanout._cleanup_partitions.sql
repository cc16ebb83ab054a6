-- fanout._cleanup_partitions(p_now): reclaims storage by dropping whole closed
-- partitions, oldest first, per topic:
--   * when every group that pins storage (fanout._group_pins) has passed it
--     (fanout._group_passed) and it closed more than retention ago (or
--     zero_subscription_retention ago when no group pins the topic);
--   * unconditionally once it closed more than max_retention ago.
-- Every non-cancelled group that had not consumed all of a dropped partition
-- (a dead or zombie group, or anyone at max_retention) gets the unread rows
-- counted in lost_messages (and the topic in dropped_unread), its leases,
-- retries and sequence waiters into the partition are released
-- (fanout._release_lost: dead reference-mode groups too, whose loss their
-- bits count), and the loss goes to fanout.event_log. No row is ever updated or deleted in a message table: a
-- partition is emptied with TRUNCATE, which locks only the partition (readers
-- lock the parent first, so dropping here could deadlock with them), and
-- dropped, empty, as soon as it and its parent can be locked without
-- waiting (partition first: some look-ups read a partition directly).
-- Reference mode: the partition's completion rows (m<topic_id>_done_p<n>)
-- are emptied and dropped with it, and locked with it: an ack still
-- recording completions there keeps the partition for a later round.
-- A candidate is checked, then locked (ACCESS EXCLUSIVE, waiting at most
-- 200 ms: a transaction still writing into it keeps it for a later round),
-- then checked again, so a message committed in between is never lost. Once
-- the call holds a partition it never waits (1 ms lock timeout, NOWAIT): a
-- wait there could close a lock cycle with readers and ackers.
-- A topic that fails is logged (fanout._maint_failed) and skipped.
-- A topic switching from reference to offset completion is first handed to
-- fanout._completion_switch_finish and left alone until that has finished;
-- from then on it is an offset topic whose completion partitions (of the
-- partitions it had before) go with their message partitions, the
-- completion table with the last of them.
-- A topic switched from offset to reference completion: partitions with
-- rows below the switch id go by the offset rule too (their rows carry no
-- bits; fanout._partition_droppable), and a group's loss there is counted
-- by its position.
-- Offset topics (and those switched to reference): closed partitions are summarized first
-- (fanout._summarize_partitions), which keeps the per-group checks and loss
-- counts look-ups rather than scans.
-- Bounded: at most 10 partitions and 100 topics per call, and no new topic
-- or partition once the call has run 250 ms: it works through the topics that have a
-- closed partition (or, in reference mode, stamps to reconcile) in slices,
-- resuming after the last one on the next call (fanout.lock_row's
-- resume_after), so thousands of topics never make one call long or make it
-- hold thousands of locks. Returns how many partitions were emptied, plus
-- one while the pass over the topics is not finished; call again while it
-- returns > 0. Takes its own lock row (fanout._try_lock).
-- Tables: fanout.partition, fanout.consumer_group, fanout.lease,
-- fanout.retry, fanout.seq_wait, fanout.seq_lost, fanout.topic, fanout.event_log, fanout_data.*
-- (message partitions and their completion partitions).
CREATE OR REPLACE FUNCTION fanout._cleanup_partitions(p_now timestamptz DEFAULT now())
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_t        fanout.topic;
    v_p        fanout.partition;
    g          fanout.consumer_group;
    v_done     int := 0;
    v_forced   boolean;
    v_lost     bigint;
    v_total    bigint;
    v_n        bigint;
    v_timeout  text := current_setting('lock_timeout');
    v_done_rel text;
    v_has_done boolean;
    v_dead_ref boolean;
    v_held     bigint;
    v_after    bigint;
    v_last     bigint;
    v_seen     int := 0;
    v_more     boolean := false;
    v_cut      boolean := false;
    v_free     boolean;
    c_budget   constant interval := '250 ms';
    v_start    timestamptz := clock_timestamp();
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    IF NOT fanout._try_lock('maint:cleanup_partitions') THEN
        RETURN 0;
    END IF;
    SELECT l.resume_after INTO v_after FROM fanout.lock_row l WHERE l.name = 'maint:cleanup_partitions';
    -- OFFSET 0 keeps each EXISTS a look-up per topic, in topic order from
    -- v_after: without it both were planned as hashed subplans, which read
    -- every closed partition (every pending stamp) of every topic on each
    -- call, and a pass over n topics read n^2/100 rows.
    FOR v_t IN
        SELECT * FROM fanout.topic t
        WHERE t.topic_id > coalesce(v_after, 0)
          AND (EXISTS (SELECT 1 FROM fanout.partition p WHERE p.topic_id = t.topic_id AND p.closed_at IS NOT NULL OFFSET 0)
               OR t.completion = 'reference'
                  AND EXISTS (SELECT 1 FROM fanout.stamp_pending s WHERE s.topic_id = t.topic_id OFFSET 0)
               OR t.completion_switch_id IS NOT NULL AND t.completion_switch_done_at IS NULL)
        ORDER BY t.topic_id
        LIMIT 101
    LOOP
        IF v_seen = 100 OR v_done >= 10 OR (v_seen > 0 AND clock_timestamp() - v_start > c_budget) THEN
            v_more := true;  -- the rest on the next call
            IF v_cut THEN
                v_last := v_last - 1;  -- from the last topic again: it may have more to empty
            END IF;
            EXIT;
        END IF;
        v_seen := v_seen + 1;
        v_last := v_t.topic_id;
        BEGIN  -- one topic's failure is logged and skipped (fanout._maint_failed)
        -- A topic whose row another transaction holds (an alter or a drop,
        -- maybe a tenant's left open) is passed by, not waited for.
        CONTINUE WHEN NOT fanout._maint_lock_topic('fanout._cleanup_partitions', v_t.topic_id);
        -- A completion switch in progress is finished first; nothing goes
        -- until it is (its groups' bits still filter what they read).
        CONTINUE WHEN NOT fanout._completion_switch_finish(v_t, p_now);
        IF v_t.completion = 'reference' THEN
            PERFORM fanout._reconcile_stamps(v_t.topic_id, pg_current_snapshot());
        END IF;
        IF v_t.completion = 'offset' OR v_t.completion_switch_id IS NOT NULL THEN
            -- (switched to reference: its partitions below the switch id
            -- go by the offset rule, fanout._partition_droppable)
            PERFORM fanout._summarize_partitions(v_t.topic_id);
        END IF;
        FOR v_p IN
            SELECT * FROM fanout.partition p
            WHERE p.topic_id = v_t.topic_id AND p.closed_at IS NOT NULL AND p.truncated_at IS NULL
            ORDER BY p.part_no
        LOOP
            IF v_done >= 10 THEN
                v_cut := true;  -- the topic again on the next call
                EXIT;
            END IF;
            v_forced := v_p.closed_at <= p_now - v_t.max_retention;
            -- A topic switched from reference mode keeps completion
            -- partitions for the partitions it had then (and created until
            -- the switch finished); they go with their message partitions.
            v_done_rel := CASE WHEN v_t.completion = 'reference'
                                    OR v_t.completion_switch_id IS NOT NULL
                                       AND to_regclass(format('fanout_data.%I', v_t.data_table || '_done_p' || v_p.part_no)) IS NOT NULL
                               THEN v_t.data_table || '_done_p' || v_p.part_no END;
            -- Later partitions are younger and no further consumed.
            EXIT WHEN NOT v_forced AND NOT fanout._partition_droppable(v_t, v_p, p_now);
            -- One more to empty: not begun after the time budget once one
            -- was (the topic again on the next call).
            IF v_done > 0 AND clock_timestamp() - v_start > c_budget THEN
                v_cut := true;
                EXIT;
            END IF;
            BEGIN
                -- Waiting is allowed only while this call holds no partition
                -- yet: the first lock may wait 200 ms (readers' statements
                -- hold every partition briefly); every later lock of the
                -- call, including the completion partition and the lease and
                -- retry rows of the count below, is all but NOWAIT (1 ms).
                -- A call that waited while holding a partition would be the
                -- middle of a lock cycle: a reader holding a partition (a
                -- direct look-up) waits for another reader's group row, that
                -- reader for the partition held here; an ack holding its
                -- lease row waits for the partition. The round gives up
                -- instead, and a later call tries again.
                PERFORM set_config('lock_timeout', CASE WHEN v_done = 0 THEN '200ms' ELSE '1ms' END, true);
                EXECUTE format('LOCK TABLE fanout_data.%I IN ACCESS EXCLUSIVE MODE', v_p.relname);
                PERFORM set_config('lock_timeout', '1ms', true);
                IF v_done_rel IS NOT NULL THEN
                    -- An ack still writing its completion rows keeps it too.
                    EXECUTE format('LOCK TABLE fanout_data.%I IN ACCESS EXCLUSIVE MODE NOWAIT', v_done_rel);
                END IF;
                IF NOT v_forced AND NOT fanout._partition_droppable(v_t, v_p, p_now) THEN
                    PERFORM set_config('lock_timeout', v_timeout, true);
                    EXIT;
                END IF;

                v_total := 0;
                -- Groups whose window starts past the partition's bound and
                -- that hold nothing in it lost nothing: one statement sets
                -- them aside, and a group not yet in the partition is counted
                -- from its summary (fanout._group_unread), so this stays one
                -- pass over the partition, not one per group.
                FOR g IN SELECT * FROM fanout.consumer_group cg
                         WHERE cg.topic_id = v_t.topic_id AND cg.status <> 'cancelled'
                           AND ((cg.bit_no IS NOT NULL AND cg.status = 'dead'
                                 AND v_p.lo_id >= coalesce(v_t.completion_switch_id, 0))
                                OR v_p.txid_bound IS NULL OR pg_snapshot_xmin(cg.win_lo) < v_p.txid_bound
                                OR fanout._group_holds_in(cg.group_id, v_p))
                         ORDER BY cg.group_id LOOP
                    -- (a partition with rows from before a switch to
                    -- reference counts by position, as in offset mode)
                    v_dead_ref := g.bit_no IS NOT NULL AND g.status = 'dead'
                                  AND v_p.lo_id >= coalesce(v_t.completion_switch_id, 0);
                    IF v_dead_ref THEN
                        -- Reference mode: a dead group's bit was released, so
                        -- nothing looks unread to it; what it had not
                        -- completed since it joined is what it loses (its
                        -- holds below included: released, not counted again).
                        EXECUTE format('SELECT count(*) FROM fanout_data.%I m
                                        WHERE m.id >= $1
                                          AND NOT EXISTS (SELECT 1 FROM fanout_data.%I d
                                                          CROSS JOIN LATERAL unnest(d.ids) AS u(id)
                                                          WHERE d.bit = $2 AND u.id = m.id)',
                                       v_p.relname, v_done_rel)
                            INTO v_lost USING g.joined_id, g.bit_no;
                    ELSE
                        CONTINUE WHEN fanout._group_passed(g, v_p);
                        -- The loss is what this call takes away: the rows the
                        -- group has not read, and the retries, sequence waiters
                        -- and open lease entries it removes, counted as removed
                        -- (an ack that settled some of them meanwhile wins, and
                        -- they are not lost).
                        v_lost := (SELECT u.messages FROM fanout._group_unread(g.group_id, NULL, v_p.relname) u);
                    END IF;
                    v_held := fanout._release_lost(g.group_id, v_p, v_t.sequence_ordering);
                    IF NOT v_dead_ref THEN
                        v_lost := v_lost + v_held;
                    END IF;
                    IF v_lost > 0 THEN
                        UPDATE fanout.consumer_group cg SET lost_messages = cg.lost_messages + v_lost
                        WHERE cg.group_id = g.group_id;
                        INSERT INTO fanout.event_log (topic, group_name, kind, count, detail)
                        VALUES (v_t.topic, g.group_name, 'unread_dropped', v_lost,
                                jsonb_build_object('partition', v_p.relname, 'group_status', g.status,
                                                   'reason', CASE WHEN v_dead_ref THEN 'group dead'
                                                                  WHEN v_forced THEN 'max_retention'
                                                                  ELSE 'group not pinning' END));
                        v_total := v_total + v_lost;
                    END IF;
                END LOOP;

                IF v_t.sequence_ordering THEN
                    PERFORM fanout._sequence_dropped(v_t.topic_id, v_p);
                END IF;
                -- Dropped at once when its parent (and in reference mode
                -- the completion table) is free this instant (NOWAIT, the
                -- partition already held: the order of the drops below);
                -- else emptied with TRUNCATE, which locks only the partition
                -- (readers lock the parent first, so waiting for it here
                -- could deadlock with them), and dropped by a later call.
                -- Not both: TRUNCATE builds every index of the partition
                -- anew, empty, and each build syncs its new file to disk,
                -- several syncs per partition for nothing when the drop
                -- follows in the same transaction.
                v_free := true;
                BEGIN
                    EXECUTE format('LOCK TABLE ONLY fanout_data.%I IN ACCESS EXCLUSIVE MODE NOWAIT', v_t.data_table);
                    IF v_done_rel IS NOT NULL THEN
                        EXECUTE format('LOCK TABLE ONLY fanout_data.%I IN ACCESS EXCLUSIVE MODE NOWAIT',
                                       v_t.data_table || '_done');
                    END IF;
                EXCEPTION WHEN lock_not_available THEN
                    v_free := false;
                END;
                IF v_free THEN
                    EXECUTE format('DROP TABLE fanout_data.%I', v_p.relname);
                    IF v_done_rel IS NOT NULL THEN
                        EXECUTE format('DROP TABLE IF EXISTS fanout_data.%I', v_done_rel);
                    END IF;
                    DELETE FROM fanout.partition p WHERE p.topic_id = v_p.topic_id AND p.part_no = v_p.part_no;
                ELSE
                    EXECUTE format('TRUNCATE fanout_data.%I', v_p.relname);
                    IF v_done_rel IS NOT NULL THEN
                        EXECUTE format('TRUNCATE fanout_data.%I', v_done_rel);
                    END IF;
                    UPDATE fanout.partition p SET truncated_at = clock_timestamp()
                    WHERE p.topic_id = v_p.topic_id AND p.part_no = v_p.part_no;
                END IF;
                IF v_total > 0 THEN
                    UPDATE fanout.topic t SET dropped_unread = t.dropped_unread + v_total
                    WHERE t.topic_id = v_t.topic_id;
                END IF;
                v_done := v_done + 1;
                PERFORM set_config('lock_timeout', v_timeout, true);
            EXCEPTION WHEN lock_not_available THEN
                -- All of it or none: the subtransaction rolled back any counting.
                RAISE NOTICE 'fanout: partition % is busy; emptying it later', v_p.relname;
                EXIT;
            END;
        END LOOP;
        -- Empty partitions go when the parent is free this instant (NOWAIT:
        -- never queue in front of publishers and readers).
        FOR v_p IN
            SELECT * FROM fanout.partition p WHERE p.topic_id = v_t.topic_id AND p.truncated_at IS NOT NULL
        LOOP
            BEGIN
                -- Every lock NOWAIT, the partitions before their parents:
                -- holding a parent while queueing for a partition would
                -- stop every publisher and reader of the topic behind this
                -- call (and deadlock with a transaction that holds the
                -- partition and waits for one of them).
                EXECUTE format('LOCK TABLE fanout_data.%I IN ACCESS EXCLUSIVE MODE NOWAIT', v_p.relname);
                EXECUTE format('LOCK TABLE ONLY fanout_data.%I IN ACCESS EXCLUSIVE MODE NOWAIT', v_t.data_table);
                v_has_done := v_t.completion = 'reference'
                              OR v_t.completion_switch_id IS NOT NULL
                                 AND to_regclass(format('fanout_data.%I', v_t.data_table || '_done')) IS NOT NULL;
                IF v_has_done THEN
                    v_done_rel := v_t.data_table || '_done_p' || v_p.part_no;
                    IF to_regclass(format('fanout_data.%I', v_done_rel)) IS NOT NULL THEN
                        EXECUTE format('LOCK TABLE fanout_data.%I IN ACCESS EXCLUSIVE MODE NOWAIT', v_done_rel);
                    END IF;
                    EXECUTE format('LOCK TABLE ONLY fanout_data.%I IN ACCESS EXCLUSIVE MODE NOWAIT',
                                   v_t.data_table || '_done');
                END IF;
                EXECUTE format('DROP TABLE fanout_data.%I', v_p.relname);
                IF v_has_done THEN
                    EXECUTE format('DROP TABLE IF EXISTS fanout_data.%I', v_done_rel);
                END IF;
                IF v_has_done AND v_t.completion = 'offset' AND NOT EXISTS (
                       SELECT 1 FROM pg_inherits i
                       WHERE i.inhparent = format('fanout_data.%I', v_t.data_table || '_done')::regclass) THEN
                    -- Switched from reference mode and the last completion
                    -- partition gone (the switch finished: cleanup runs only
                    -- then): the completion table goes too.
                    EXECUTE format('DROP TABLE fanout_data.%I', v_t.data_table || '_done');
                    EXECUTE format('DROP FUNCTION IF EXISTS fanout_data.%I(smallint, bigint[])',
                                   v_t.data_table || '_done_add');
                END IF;
                DELETE FROM fanout.partition p WHERE p.topic_id = v_p.topic_id AND p.part_no = v_p.part_no;
            EXCEPTION WHEN lock_not_available THEN
                EXIT;
            END;
        END LOOP;
        EXCEPTION WHEN OTHERS THEN
            PERFORM fanout._maint_failed('fanout._cleanup_partitions', v_t.topic_id, NULL, SQLSTATE, SQLERRM);
        END;
    END LOOP;
    IF v_cut AND NOT v_more THEN
        -- The last topic was cut short with no topic after it: from it again.
        v_more := true;
        v_last := v_last - 1;
    END IF;
    UPDATE fanout.lock_row l SET resume_after = CASE WHEN v_more THEN v_last ELSE 0 END
    WHERE l.name = 'maint:cleanup_partitions';
    RETURN v_done + CASE WHEN v_more THEN 1 ELSE 0 END;
END
$fn$;
