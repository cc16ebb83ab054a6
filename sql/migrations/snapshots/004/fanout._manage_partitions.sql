-- fanout._manage_partitions(p_now): partition pre-creation and rotation.
-- Message ids come from a per-topic sequence; partition k holds ids
-- [k << 32, (k + 1) << 32), so publish never runs out of partition even if
-- maintenance never runs. Each topic keeps one partition ready ahead of the
-- open one; rotation into it is three steps, one per call, each in its own
-- transaction:
--   1. create the next partition as soon as there is none (ATTACHed: SHARE
--      UPDATE EXCLUSIVE on the parent, publishers and readers are never
--      blocked);
--   2. refresh every session's partition list: a no-op catalog update of the
--      parent (and of its completion table in reference mode) whose commit
--      sends a relation cache invalidation;
--   3. once the open partition has been open for partition_interval and is
--      not empty, jump the sequence into the next partition and close the
--      old one with a txid bound above the xid of every transaction that can
--      have taken an id in it, which lets reads skip it
--      (fanout._partition_floor). Publish takes its xid before its id, so
--      such a transaction had its xid before the jump: after the jump it has
--      either ended (its xid is below the xmax of a later snapshot) or still
--      holds the lock on its own xid (pg_locks). The xmax alone is not
--      enough: it is latestCompletedXid + 1, and a running transaction that
--      took its xid after the last one that ended is at or above it.
-- Steps 1 and 2 run right after a jump, so a rotation that is due happens at
-- the first call after it is due.
-- Why step 2, and the waits. A session that still uses a partition list
-- without the new partition would fail to insert into it ("no partition of
-- relation found for row": a publish, or an ack's completion row) or, worse,
-- a reader would scan past its rows. PostgreSQL does not refresh a
-- relation's partition list inside a transaction that already holds a lock
-- on it, and a session can also keep a stale list *after* its transaction:
-- one that was building the list when the ATTACH committed (its pg_inherits
-- scan predates the commit) can take the invalidation in the middle of the
-- build (a catalog cache miss locks pg_class, which reads pending
-- invalidations) and then store the list it built, and nothing invalidates
-- it again until the next change to the parent. Seen under load in
-- TestEdgesStress: fresh transactions more than a second after the ATTACH
-- still missed the partition. So:
--   * step 2 waits for every transaction of the database that was running
--     when the creation was first seen committed (stale_vxids): every build
--     that can have used a list from before the ATTACH has finished, and
--     the invalidation of step 2 then reaches every session that kept one;
--   * step 3 waits for every transaction that was running when step 2 was
--     first seen committed (refresh_vxids): a transaction that took its lock
--     on the table before the refresh keeps its old list until it ends.
--   After c_stale_wait a transaction that is still running holds a step
--   back only while it holds the topic's table: a session idle in a
--   transaction elsewhere cannot stop rotation for good.
-- Must run in READ COMMITTED (each statement needs a fresh snapshot).
-- Bounded: it works through the topics in slices, resuming after the last
-- topic it visited on its next call (fanout.lock_row's resume_after): at
-- most 100 topics, 50 steps and 8 partition tables created per call (a
-- creation is the one costly step: a table, its TOAST table and index and
-- one build per index, each build syncing its new file to disk, so its
-- time is the disk's; a reference-mode topic's completion partition counts
-- as a second table), and no topic begun once the call has run 250 ms, or
-- once the time it has run plus its longest step so far would pass 250 ms
-- (the budget is not overrun by a whole step), whether that topic has a
-- step to do or only waits
-- (recording the transactions a step waits for is work too: thousands of
-- topics' worth made one call take seconds). The running transactions are
-- read once per call (fanout._running_vxids: pg_locks and
-- pg_stat_activity), not once per topic, for every topic whose creation or
-- refresh ended before they were read. Returns the number of steps done,
-- plus one while the pass over the topics is not finished (a round that
-- began in the middle of a pass, where an earlier one stopped, ends at
-- the last topic: the first ones are the next round's); call again while
-- it returns > 0. Takes its own lock row,
-- fanout._try_lock (returns 0 if another caller holds it).
-- A topic whose step fails is logged (fanout._maint_failed) and skipped.
-- Never waits for a tenant: before a step it locks the topic's row without
-- waiting (fanout._maint_lock_topic: a topic whose alter_topic or drop_topic
-- is still open is passed by), and every other lock it takes on a topic's
-- objects waits at most 200 ms (lock_timeout); a topic passed by either way
-- is recorded in fanout.maint_skip (fanout.maint_skips()) and tried again by
-- the next call.
-- Raises: PGQ09 (not READ COMMITTED).
-- Tables: fanout.topic, fanout.partition, fanout.topic_ids_left (at a jump: the ids
-- the sequence handed out in the partition it leaves, for the published
-- counter), fanout_data.*; reads pg_locks and pg_stat_activity.
CREATE OR REPLACE FUNCTION fanout._manage_partitions(p_now timestamptz DEFAULT now())
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
SET lock_timeout = '200ms'
AS $fn$
DECLARE
    r        record;
    v_done   int := 0;
    v_last   bigint;
    v_called boolean;
    v_empty  boolean;
    v_bound  xid8;
    v_ref    bigint;
    v_run    bigint;
    v_rel    regclass;
    v_stale  text[];
    v_since  timestamptz;
    v_timeout text;
    v_after  bigint;
    v_cursor bigint;   -- the last topic visited
    v_seen   int := 0;
    v_more   boolean := false;
    v_vx     text[];   -- the running transactions, read once per call
    v_vx_snap pg_snapshot;  -- taken right before v_vx was read
    c_stale_wait constant interval := '10 minutes';
    c_func       constant text := 'fanout._manage_partitions';
    c_slice      constant int := 100;
    c_steps      constant int := 50;
    c_creates    constant int := 8;
    c_budget     constant interval := '250 ms';
    v_start      timestamptz := clock_timestamp();
    v_created    int := 0;        -- partition tables created by this call
    v_step_at    timestamptz;     -- when the current topic's visit began
    v_step_max   interval := '0'; -- the longest visit (step) of this call
    v_is_ref     boolean;
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'fanout._manage_partitions must run in READ COMMITTED, not %',
            upper(current_setting('transaction_isolation')) USING ERRCODE = 'PGQ09';
    END IF;
    IF NOT fanout._try_lock('maint:manage_partitions') THEN
        RETURN 0;
    END IF;
    DELETE FROM fanout.maint_skip s  -- of topics dropped since
    WHERE s.func = c_func AND NOT EXISTS (SELECT 1 FROM fanout.topic t WHERE t.topic_id = s.topic_id);
    SELECT coalesce(l.resume_after, 0) INTO v_after FROM fanout.lock_row l WHERE l.name = 'maint:manage_partitions';
    v_after := coalesce(v_after, 0);
    FOR r IN
        SELECT t.topic_id, t.seq_name, t.data_table, t.partition_interval, c.part_no, c.relname, c.lo_id AS cur_lo,
               coalesce(c.opened_at, c.created_at) AS opened_at,
               n.part_no AS next_no, n.lo_id AS next_lo, n.created_xid AS next_xid, n.stale_vxids AS next_stale,
               n.stale_at AS next_stale_at, n.refresh_xid AS next_refresh_xid,
               n.refresh_vxids AS next_refresh_vxids, n.refresh_at AS next_refresh_at,
               -- a switch to offset in progress: acks still record completions
               CASE WHEN t.completion_switch_id IS NOT NULL AND t.completion_switch_done_at IS NULL
                    THEN 'reference' ELSE t.completion END AS completion
        FROM fanout.topic t
        JOIN LATERAL (SELECT p.* FROM fanout.partition p
                      WHERE p.topic_id = t.topic_id AND p.closed_at IS NULL
                      ORDER BY p.part_no LIMIT 1) c ON true
        -- LATERAL with LIMIT (which keeps the planner from turning it back
        -- into a join): one index look-up per topic of the slice. As a
        -- plain join it was planned as a merge join whose scan of the
        -- partitions began at the first topic, not at v_after: each call
        -- read every partition of the topics before its slice, and a pass
        -- over n topics read n^2/100 rows.
        LEFT JOIN LATERAL (SELECT p.* FROM fanout.partition p
                           WHERE p.topic_id = t.topic_id AND p.part_no = c.part_no + 1 LIMIT 1) n ON true
        WHERE t.topic_id > v_after
        ORDER BY t.topic_id
        LIMIT c_slice + 1
    LOOP
        -- A slice of 100 topics, 50 steps, 8 partition tables created, and
        -- no topic begun once the call has run 250 ms or would pass it with
        -- one more step as long as its longest so far (creating a partition
        -- is DDL: thousands of topics due at once are worked through in
        -- calls that stay short); the rest from this topic on, on the next
        -- call.
        IF v_step_at IS NOT NULL THEN  -- the visit before this one (a step or not)
            v_step_max := greatest(v_step_max, clock_timestamp() - v_step_at);
        END IF;
        v_is_ref := r.completion = 'reference';
        IF v_seen >= c_slice OR v_done >= c_steps
           OR (r.next_no IS NULL AND v_created + CASE WHEN v_is_ref THEN 2 ELSE 1 END > c_creates AND v_created > 0)
           OR (v_seen > 0 AND clock_timestamp() - v_start + v_step_max > c_budget) THEN
            v_more := true;
            EXIT;
        END IF;
        v_seen := v_seen + 1;
        v_cursor := r.topic_id;
        v_step_at := clock_timestamp();
        BEGIN  -- one topic's failure is logged and skipped (fanout._maint_failed)
        IF r.next_no IS NULL THEN
            CONTINUE WHEN NOT fanout._maint_lock_topic(c_func, r.topic_id);
            PERFORM fanout._create_partition(r.topic_id, r.part_no + 1);
            v_created := v_created + CASE WHEN v_is_ref THEN 2 ELSE 1 END;
            v_done := v_done + 1;
        ELSE
            -- Jump only into a partition whose creation has committed: if this
            -- transaction rolled back after the jump, publish would fail.
            CONTINUE WHEN pg_xact_status(r.next_xid) IS DISTINCT FROM 'committed';
            -- Steps 2 and 3 have work only when these hold (else the checks
            -- below continue without touching the topic).
            CONTINUE WHEN (r.next_refresh_xid IS NOT NULL
                           AND (pg_xact_status(r.next_refresh_xid) IS DISTINCT FROM 'committed'
                                OR (r.next_refresh_vxids IS NOT NULL AND r.opened_at > p_now - r.partition_interval)))
                          OR NOT fanout._maint_lock_topic(c_func, r.topic_id);
            v_rel := format('fanout_data.%I', r.data_table)::regclass;
            IF r.next_refresh_xid IS NULL THEN
                -- Step 2, once every transaction running when the creation
                -- was first seen committed has ended (prepared transactions
                -- run no more statements: not counted).
                v_stale := r.next_stale;
                v_since := r.next_stale_at;
                IF v_stale IS NULL THEN
                    -- The list read for an earlier topic of this call when
                    -- the creation (committed) had ended before it was read:
                    -- visible in the snapshot taken right before (else afresh).
                    IF v_vx IS NULL OR NOT pg_visible_in_snapshot(r.next_xid, v_vx_snap) THEN
                        v_vx_snap := pg_current_snapshot();
                        v_vx := fanout._running_vxids();
                    END IF;
                    v_stale := v_vx;
                    v_since := p_now;
                    UPDATE fanout.partition p SET stale_vxids = v_stale, stale_at = v_since
                    WHERE p.topic_id = r.topic_id AND p.part_no = r.next_no;
                END IF;
                CONTINUE WHEN fanout._vxids_block(v_stale, v_since, p_now, c_stale_wait, v_rel);
                -- SHARE UPDATE EXCLUSIVE: conflicts with no publisher or
                -- reader, only with other DDL and cleanup's drops.
                v_timeout := current_setting('lock_timeout');
                BEGIN
                    PERFORM set_config('lock_timeout', '200ms', true);
                    EXECUTE format('ALTER TABLE ONLY fanout_data.%I ALTER COLUMN payload SET STATISTICS -1',
                                   r.data_table);
                    IF r.completion = 'reference' THEN
                        EXECUTE format('ALTER TABLE ONLY fanout_data.%I ALTER COLUMN ids SET STATISTICS -1',
                                       r.data_table || '_done');
                    END IF;
                    PERFORM set_config('lock_timeout', v_timeout, true);
                EXCEPTION WHEN lock_not_available THEN
                    -- The subtransaction's rollback restored lock_timeout.
                    PERFORM fanout._maint_skipped(c_func, r.topic_id, SQLERRM);
                    CONTINUE;
                END;
                UPDATE fanout.partition p SET refresh_xid = pg_current_xact_id()
                WHERE p.topic_id = r.topic_id AND p.part_no = r.next_no;
                v_done := v_done + 1;
                CONTINUE;
            END IF;
            -- Step 3, once every transaction running when the refresh was
            -- first seen committed has ended.
            CONTINUE WHEN pg_xact_status(r.next_refresh_xid) IS DISTINCT FROM 'committed';
            v_stale := r.next_refresh_vxids;
            v_since := r.next_refresh_at;
            IF v_stale IS NULL THEN
                -- As for step 2: the list of this call when the refresh had
                -- ended before it was read.
                IF v_vx IS NULL OR NOT pg_visible_in_snapshot(r.next_refresh_xid, v_vx_snap) THEN
                    v_vx_snap := pg_current_snapshot();
                    v_vx := fanout._running_vxids();
                END IF;
                v_stale := v_vx;
                v_since := p_now;
                UPDATE fanout.partition p SET refresh_vxids = v_stale, refresh_at = v_since
                WHERE p.topic_id = r.topic_id AND p.part_no = r.next_no;
            END IF;
            CONTINUE WHEN r.opened_at > p_now - r.partition_interval;
            EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM fanout_data.%I)', r.relname) INTO v_empty;
            CONTINUE WHEN v_empty;
            CONTINUE WHEN fanout._vxids_block(v_stale, v_since, p_now, c_stale_wait, v_rel);
            EXECUTE format('SELECT last_value, is_called FROM fanout_data.%I', r.seq_name) INTO v_last, v_called;
            IF v_last < r.next_lo THEN
                PERFORM setval(format('fanout_data.%I', r.seq_name)::regclass, r.next_lo, false);
                -- The ids handed out in the partition left behind: with the
                -- open one's, what the topic has published (the sidecar's
                -- pgq_topic_published_messages_total), which the sequence
                -- alone cannot say once it has jumped.
                INSERT INTO fanout.topic_ids_left AS l (topic_id, ids)
                VALUES (r.topic_id, CASE WHEN v_called AND v_last >= r.cur_lo THEN v_last - greatest(r.cur_lo, 1) + 1 ELSE 0 END)
                ON CONFLICT (topic_id) DO UPDATE SET ids = l.ids + EXCLUDED.ids;
            END IF;
            -- Running xids first (pg_locks shows 32-bit xids: widen them
            -- around a reference), then a snapshot: a writer that ends in
            -- between has advanced that snapshot's xmax past its xid.
            v_ref := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
            SELECT max(v_ref + ((l.transactionid::text::bigint - v_ref) % 4294967296 + 4294967296 + 2147483648)
                                % 4294967296 - 2147483648) + 1
            INTO v_run
            FROM pg_locks l WHERE l.locktype = 'transactionid';
            v_bound := pg_snapshot_xmax(pg_current_snapshot());
            IF v_run IS NOT NULL AND v_run > v_bound::text::bigint THEN
                v_bound := v_run::text::xid8;
            END IF;
            UPDATE fanout.partition p SET closed_at = clock_timestamp(), txid_bound = v_bound
            WHERE p.topic_id = r.topic_id AND p.part_no = r.part_no;
            UPDATE fanout.partition p SET opened_at = clock_timestamp()
            WHERE p.topic_id = r.topic_id AND p.part_no = r.next_no;
            v_done := v_done + 1;
        END IF;
        EXCEPTION
            WHEN lock_not_available THEN  -- another transaction's lock on the topic's objects, over 200 ms
                PERFORM fanout._maint_skipped(c_func, r.topic_id, SQLERRM);
            WHEN OTHERS THEN
                PERFORM fanout._maint_failed(c_func, r.topic_id, NULL, SQLSTATE, SQLERRM);
        END;
    END LOOP;
    UPDATE fanout.lock_row l SET resume_after = CASE WHEN v_more THEN v_cursor ELSE 0 END
    WHERE l.name = 'maint:manage_partitions';
    RETURN v_done + CASE WHEN v_more THEN 1 ELSE 0 END;
END
$fn$;
