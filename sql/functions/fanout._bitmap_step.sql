-- fanout._bitmap_step(p_now, p_group_id): one batch of one reference-mode
-- bitmap job (fanout.bitmap_job), the job with the oldest progress first (or
-- p_group_id's):
--   backfill  sets the group's bit in required_groups of messages from
--             from_id on that are not COMPLETED and that it has not completed
--             (late join with earliest/timestamp/message_id, or resurrection);
--             scope pending_only takes only messages another group still has
--             to ack, all_retained also the unclaimed ones (published while
--             no group was subscribed);
--   release   clears a dead or cancelled group's bit from required_groups of
--             messages it has not completed, so they complete for the others.
-- COMPLETED messages (required_groups <> 0 and the groups done with it,
-- fanout._done_bits, covering it) are never touched. The first step runs after the group's change committed:
-- it notes the last id assigned (upto_id) and the transactions then writing
-- to the topic (fence_txids: only they can still commit rows stamped with the
-- old bitmap); batches of batch_size ids then walk [from_id, upto_id] on the
-- id index, each checkpointed in next_id, and a last step fixes the rows of
-- the fence transactions once they have all ended. Setting or clearing a bit
-- twice changes nothing, so steps are idempotent and a crash just repeats a
-- batch. It never waits for a row lock (a batch with a row locked by an ack
-- in progress is tried again on a later call). Returns messages examined (0
-- when there is nothing to do, the job waits for the fence or its batch is
-- busy); call again while it returns > 0. Concurrent
-- callers never work on the same job (its row is locked, SKIP LOCKED). A job
-- whose step fails (other than on a lock or serialization conflict) is set
-- to 'failed' with last_error and logged (fanout._maint_failed), so it
-- never blocks the other jobs.
-- Tables: fanout.bitmap_job, fanout.consumer_group, fanout.topic,
-- fanout.event_log, fanout_data.m<topic_id>, fanout_data.m<topic_id>_done (read).
CREATE OR REPLACE FUNCTION fanout._bitmap_step(p_now timestamptz DEFAULT now(), p_group_id bigint DEFAULT NULL)
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_j     fanout.bitmap_job;
    v_g     fanout.consumer_group;
    v_t     fanout.topic;
    v_bit   bigint;
    v_ids   bigint[];
    v_n     int;
    v_set   text;
    v_where text;
    v_update text;
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    SELECT j.* INTO v_j FROM fanout.bitmap_job j
    WHERE j.status IN ('not_started', 'in_progress') AND (p_group_id IS NULL OR j.group_id = p_group_id)
    ORDER BY j.updated_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    BEGIN  -- a job that fails is marked failed and skipped (see the handler below)
    SELECT * INTO STRICT v_g FROM fanout.consumer_group g WHERE g.group_id = v_j.group_id;
    SELECT * INTO STRICT v_t FROM fanout.topic t WHERE t.topic_id = v_g.topic_id;
    v_bit := 1::bigint << v_g.bit_no;
    IF v_j.kind = 'backfill' THEN
        v_set := 'required_groups = m.required_groups | $1';
        -- pending_only: messages some group still has to ack; all_retained:
        -- also those published while no group was subscribed (unclaimed).
        v_where := '(m.required_groups & $1) = 0 AND (c.done & $1) = 0 AND '
                   || CASE WHEN v_j.scope = 'pending_only'
                           THEN '(m.required_groups & ~c.done) <> 0'
                           ELSE '(m.required_groups = 0 OR (m.required_groups & ~c.done) <> 0)' END;
    ELSE
        v_set := 'required_groups = m.required_groups & ~$1';
        v_where := '(m.required_groups & $1) <> 0 AND (c.done & $1) = 0';
    END IF;
    -- c.done: the groups done with the message (fanout._done_bits).
    v_update := format('UPDATE fanout_data.%I m SET %s
                        FROM (SELECT x.id, coalesce(d.bits, 0) AS done
                              FROM unnest($2::bigint[]) AS x(id)
                              LEFT JOIN fanout._done_bits($3, $2) d ON d.id = x.id) c
                        WHERE m.id = c.id AND %s', v_t.data_table, v_set, v_where);

    IF v_j.status = 'not_started' THEN
        -- Writers still running now may commit rows stamped with the old
        -- bitmap; they all hold a lock on the topic's table.
        v_j.fence_txids := fanout._table_writers(format('fanout_data.%I', v_t.data_table)::regclass);
        v_j.upto_id := fanout._next_id(v_t) - 1;
        EXECUTE format('SELECT count(*) FROM fanout_data.%I WHERE id >= $1 AND id <= $2', v_t.data_table)
            INTO v_j.total USING v_j.from_id, v_j.upto_id;
        UPDATE fanout.bitmap_job j
        SET status = 'in_progress', fence_txids = v_j.fence_txids, upto_id = v_j.upto_id, total = v_j.total,
            started_at = clock_timestamp(), updated_at = clock_timestamp()
        WHERE j.group_id = v_j.group_id AND j.kind = v_j.kind;
    END IF;

    IF v_j.next_id <= v_j.upto_id THEN
        -- Never waits for a row lock: an ack in a business transaction may
        -- hold rows of several leases in any order, and waiting here could
        -- close a deadlock with it. A busy batch is tried again later.
        BEGIN
            EXECUTE format('SELECT array_agg(s.id) FROM (SELECT id FROM fanout_data.%I
                            WHERE id >= $1 AND id <= $2 ORDER BY id LIMIT $3 FOR NO KEY UPDATE NOWAIT) s',
                           v_t.data_table)
                INTO v_ids USING v_j.next_id, v_j.upto_id, v_j.batch_size;
        EXCEPTION WHEN lock_not_available THEN
            RETURN 0;
        END;
        v_ids := coalesce(v_ids, '{}');
        EXECUTE v_update USING v_bit, v_ids, v_t.data_table;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        UPDATE fanout.bitmap_job j
        SET next_id = CASE WHEN cardinality(v_ids) < v_j.batch_size THEN v_j.upto_id + 1
                           ELSE v_ids[cardinality(v_ids)] + 1 END,
            processed = j.processed + cardinality(v_ids), changed = j.changed + v_n,
            updated_at = clock_timestamp()
        WHERE j.group_id = v_j.group_id AND j.kind = v_j.kind;
        RETURN greatest(cardinality(v_ids), 1);
    END IF;

    -- The walk is done. Finish once the writers that were running at the
    -- first step have ended, with a pass over their rows. Unrelated long
    -- transactions elsewhere in the cluster do not hold the job back.
    IF EXISTS (SELECT 1 FROM unnest(v_j.fence_txids) AS x WHERE pg_xact_status(x) = 'in progress') THEN
        RETURN 0;
    END IF;
    BEGIN
        EXECUTE format('SELECT array_agg(s.id) FROM (SELECT id FROM fanout_data.%I WHERE txid = ANY ($1) AND id >= $2
                                                     ORDER BY id FOR NO KEY UPDATE NOWAIT) s', v_t.data_table)
            INTO v_ids USING v_j.fence_txids, v_j.from_id;
    EXCEPTION WHEN lock_not_available THEN
        RETURN 0;
    END;
    EXECUTE v_update USING v_bit, coalesce(v_ids, '{}'), v_t.data_table;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    UPDATE fanout.bitmap_job j
    SET status = 'completed', changed = j.changed + v_n, finished_at = clock_timestamp(),
        updated_at = clock_timestamp()
    WHERE j.group_id = v_j.group_id AND j.kind = v_j.kind;
    INSERT INTO fanout.event_log (topic, group_name, kind, count, detail)
    VALUES (v_t.topic, v_g.group_name, v_j.kind || '_completed', v_j.changed + v_n,
            jsonb_build_object('processed', v_j.processed, 'from_id', v_j.from_id, 'upto_id', v_j.upto_id));
    RETURN 1;
    EXCEPTION WHEN OTHERS THEN
        IF SQLSTATE IN ('55P03', '40001', '40P01') THEN
            RAISE;  -- transient: the next call retries the job
        END IF;
        -- One broken job must not stop the others (it would be picked first
        -- forever): it becomes 'failed' (restart_backfill resumes a backfill).
        UPDATE fanout.bitmap_job j
        SET status = 'failed', last_error = left(SQLERRM, 1000), updated_at = clock_timestamp()
        WHERE j.group_id = v_j.group_id AND j.kind = v_j.kind;
        PERFORM fanout._maint_failed('fanout._bitmap_step',
            (SELECT g.topic_id FROM fanout.consumer_group g WHERE g.group_id = v_j.group_id),
            v_j.group_id, SQLSTATE, SQLERRM);
        RETURN 1;
    END;
END
$fn$;
