-- fanout._manage_partitions(p_now): partition pre-creation and rotation.
-- Message ids come from a per-topic sequence; partition k holds ids
-- [k << 32, (k + 1) << 32), so publish never runs out of partition even if
-- maintenance never runs. Rotation is two steps, one per call, each in its
-- own transaction:
--   1. when the open partition is older than partition_interval and not empty,
--      create the next one;
--   2. once that creation has committed, jump the sequence into the next
--      partition and close the old one with a txid bound: every row in it has
--      a txid below the xmax of a snapshot taken after the jump (publish takes
--      its xid before its id), which lets cleanup and reads skip it.
-- Bounded: at most 50 steps per call. Returns the number of steps done;
-- call again while it returns > 0. Takes its own advisory lock (returns 0 if
-- another caller holds it).
-- Tables: fanout.topic, fanout.partition, fanout_data.*.
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
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended('fanout.maint:manage_partitions', 0)) THEN
        RETURN 0;
    END IF;
    FOR r IN
        SELECT t.topic_id, t.seq_name, t.partition_interval, c.part_no, c.relname, c.created_at,
               n.part_no AS next_no, n.lo_id AS next_lo, n.created_xid AS next_xid
        FROM fanout.topic t
        JOIN LATERAL (SELECT p.* FROM fanout.partition p
                      WHERE p.topic_id = t.topic_id AND p.closed_at IS NULL
                      ORDER BY p.part_no LIMIT 1) c ON true
        LEFT JOIN fanout.partition n ON n.topic_id = t.topic_id AND n.part_no = c.part_no + 1
        ORDER BY t.topic_id
    LOOP
        EXIT WHEN v_done >= 50;
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
            EXECUTE format('SELECT last_value FROM fanout_data.%I', r.seq_name) INTO v_last;
            IF v_last < r.next_lo THEN
                PERFORM setval(format('fanout_data.%I', r.seq_name)::regclass, r.next_lo, false);
            END IF;
            v_bound := pg_snapshot_xmax(pg_current_snapshot());
            UPDATE fanout.partition p SET closed_at = clock_timestamp(), txid_bound = v_bound
            WHERE p.topic_id = r.topic_id AND p.part_no = r.part_no;
            v_done := v_done + 1;
        END IF;
    END LOOP;
    RETURN v_done;
END
$fn$;
