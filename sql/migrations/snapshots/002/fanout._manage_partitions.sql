-- fanout._manage_partitions(p_now): partition pre-creation and rotation.
-- Message ids come from a per-topic sequence; partition k holds ids
-- [k << 32, (k + 1) << 32), so publish never runs out of partition even if
-- maintenance never runs. Rotation is two steps, one per call, each in its
-- own transaction:
--   1. when the open partition is older than partition_interval and not empty,
--      create the next one;
--   2. once that creation has committed, jump the sequence into the next
--      partition and close the old one with a txid bound above the xid of
--      every transaction that can have taken an id in it, which lets reads
--      skip it (fanout._partition_floor). Publish takes its xid before its
--      id, so such a transaction had its xid before the jump: after the jump
--      it has either ended (its xid is below the xmax of a later snapshot) or
--      still holds the lock on its own xid (pg_locks). The xmax alone is not
--      enough: it is latestCompletedXid + 1, and a running transaction that
--      took its xid after the last one that ended is at or above it.
--      The jump waits for every transaction of the database that was
--      running when the creation was first seen committed (recorded by
--      virtual transaction id): PostgreSQL does not refresh a relation's
--      partition list inside a transaction that already holds a lock on it,
--      and under partition churn (creations and drops) a transaction that
--      locked the table only after the creation was still seen with the old
--      list, so such a producer would fail to insert into the new partition
--      ("no partition of relation found for row") and such a reader would
--      scan past it. Waiting for the holders of the table's lock alone left
--      7 such failures in 1,290 rotations of a plain partitioned table under
--      load; waiting for every transaction, none in 1,219. After
--      c_stale_wait a transaction that is still running blocks the jump
--      only while it holds the topic's table: a session idle in a
--      transaction elsewhere cannot stop rotation for good.
-- Must run in READ COMMITTED (each statement needs a fresh snapshot).
-- Bounded: at most 50 steps per call. Returns the number of steps done;
-- call again while it returns > 0. Takes its own advisory lock (returns 0 if
-- another caller holds it).
-- A topic whose step fails is logged (fanout._maint_failed) and skipped.
-- Raises: PGQ09 (not READ COMMITTED).
-- Tables: fanout.topic, fanout.partition, fanout_data.*; reads pg_locks and pg_stat_activity.
CREATE OR REPLACE FUNCTION fanout._manage_partitions(p_now timestamptz DEFAULT now())
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    r        record;
    v_done   int := 0;
    v_last   bigint;
    v_empty  boolean;
    v_bound  xid8;
    v_ref    bigint;
    v_run    bigint;
    v_rel    regclass;
    v_stale  text[];
    v_since  timestamptz;
    c_stale_wait constant interval := '10 minutes';
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'fanout._manage_partitions must run in READ COMMITTED, not %',
            upper(current_setting('transaction_isolation')) USING ERRCODE = 'PGQ09';
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtextextended('fanout.maint:manage_partitions', 0)) THEN
        RETURN 0;
    END IF;
    FOR r IN
        SELECT t.topic_id, t.seq_name, t.data_table, t.partition_interval, c.part_no, c.relname, c.created_at,
               n.part_no AS next_no, n.lo_id AS next_lo, n.created_xid AS next_xid, n.stale_vxids AS next_stale,
               n.stale_at AS next_stale_at
        FROM fanout.topic t
        JOIN LATERAL (SELECT p.* FROM fanout.partition p
                      WHERE p.topic_id = t.topic_id AND p.closed_at IS NULL
                      ORDER BY p.part_no LIMIT 1) c ON true
        LEFT JOIN fanout.partition n ON n.topic_id = t.topic_id AND n.part_no = c.part_no + 1
        ORDER BY t.topic_id
    LOOP
        EXIT WHEN v_done >= 50;
        BEGIN  -- one topic's failure is logged and skipped (fanout._maint_failed)
        IF r.next_no IS NULL THEN
            CONTINUE WHEN r.created_at > p_now - r.partition_interval;
            EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM fanout_data.%I)', r.relname) INTO v_empty;
            CONTINUE WHEN v_empty;
            PERFORM fanout._create_partition(r.topic_id, r.part_no + 1);
            v_done := v_done + 1;
        ELSE
            -- Jump only into a partition whose creation has committed: if this
            -- transaction rolled back after the jump, publish would fail.
            CONTINUE WHEN pg_xact_status(r.next_xid) IS DISTINCT FROM 'committed';
            -- Wait for the transactions whose partition list may predate it
            -- (prepared transactions run no more statements: not counted).
            v_rel := format('fanout_data.%I', r.data_table)::regclass;
            v_stale := r.next_stale;
            v_since := r.next_stale_at;
            IF v_stale IS NULL THEN
                v_stale := ARRAY(SELECT DISTINCT l.virtualtransaction
                                 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                                 WHERE l.locktype = 'virtualxid' AND a.datname = current_database()
                                   AND l.pid <> pg_backend_pid());
                v_since := p_now;
                UPDATE fanout.partition p SET stale_vxids = v_stale, stale_at = v_since
                WHERE p.topic_id = r.topic_id AND p.part_no = r.next_no;
            END IF;
            CONTINUE WHEN EXISTS (SELECT 1 FROM pg_locks l
                                  WHERE l.locktype = 'virtualxid' AND l.virtualtransaction = ANY (v_stale)
                                    AND l.pid IS NOT NULL
                                    AND (v_since > p_now - c_stale_wait
                                         OR EXISTS (SELECT 1 FROM pg_locks h
                                                    WHERE h.locktype = 'relation' AND h.relation = v_rel
                                                      AND h.virtualtransaction = l.virtualtransaction)));
            EXECUTE format('SELECT last_value FROM fanout_data.%I', r.seq_name) INTO v_last;
            IF v_last < r.next_lo THEN
                PERFORM setval(format('fanout_data.%I', r.seq_name)::regclass, r.next_lo, false);
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
            v_done := v_done + 1;
        END IF;
        EXCEPTION WHEN OTHERS THEN
            PERFORM fanout._maint_failed('fanout._manage_partitions', r.topic_id, NULL, SQLSTATE, SQLERRM);
        END;
    END LOOP;
    RETURN v_done;
END
$fn$;
