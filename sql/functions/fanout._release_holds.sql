-- fanout._release_holds(p_group_id): gives up everything a group holds: its
-- open leases are closed (their unsettled messages count as taken away, so a
-- stale holder's ack raises PGQ11) and its pending retries and sequence
-- waiters are deleted (sequence-ordered topics keep each aggregate's next_seq,
-- after applying the acks and dead letters no read has applied yet).
-- Partitioned topics: a read locks its key partition's row (not the group's)
-- and hands out its page under that lock, so a read in flight may commit a
-- page after the first pass looked for open leases. Once the open leases
-- are released, the group's key-partition rows are locked (waiting for such
-- reads) and the leases opened meanwhile are released too; those whose row
-- another session holds (an ack of them in flight) are left to it, never
-- waited for while the partition rows are held (that session may be about to
-- read a partition: a deadlock). Leases first, partition rows after, as an
-- ack followed by a read takes them.
-- Returns how many messages were released.
-- Tables: fanout.lease, fanout.kpart, fanout.retry, fanout.seq_wait, fanout.seq_done, fanout.seq_state.
CREATE OR REPLACE FUNCTION fanout._release_holds(p_group_id bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_leases bigint := 0;
    v_retry  bigint;
    v_slots  bigint[];
    v_pass   int;
BEGIN
    FOR v_pass IN 1 .. 2 LOOP
        IF v_pass = 1 THEN
            v_slots := ARRAY(SELECT l.slot_id FROM fanout.lease l
                             WHERE l.group_id = p_group_id AND l.open_count > 0
                             ORDER BY l.slot_id FOR UPDATE);
        ELSE
            PERFORM 1 FROM fanout.kpart k WHERE k.group_id = p_group_id ORDER BY k.kpart FOR UPDATE;
            EXIT WHEN NOT FOUND;  -- not partitioned
            v_slots := ARRAY(SELECT l.slot_id FROM fanout.lease l
                             WHERE l.group_id = p_group_id AND l.open_count > 0
                             ORDER BY l.slot_id FOR UPDATE SKIP LOCKED);
        END IF;
        v_leases := v_leases + (
            SELECT coalesce(sum(fanout._lease_settle(l.lease_id,
                                                     ARRAY(SELECT x FROM unnest(l.msg_ids) AS x
                                                           WHERE x <> ALL (l.settled) AND x <> ALL (l.reclaimed)),
                                                     true, true)), 0)
            FROM fanout.lease l
            WHERE l.slot_id = ANY (v_slots) AND l.open_count > 0);
    END LOOP;
    -- Acks and dead letters that no read has applied yet (fanout.seq_done)
    -- move their aggregates on first: they count (an ack whose transaction
    -- held a lease row above committed before this statement).
    PERFORM fanout._sequence_advance(p_group_id, clock_timestamp());
    DELETE FROM fanout.retry r WHERE r.group_id = p_group_id;
    GET DIAGNOSTICS v_retry = ROW_COUNT;
    v_leases := v_leases + v_retry;
    -- Sequence-ordered topics: nothing is handed out or waiting any more;
    -- every aggregate keeps its next_seq (what was acked stays acked).
    DELETE FROM fanout.seq_wait w WHERE w.group_id = p_group_id;
    GET DIAGNOSTICS v_retry = ROW_COUNT;
    DELETE FROM fanout.seq_done d WHERE d.group_id = p_group_id;
    UPDATE fanout.seq_state s SET msg_id = NULL WHERE s.group_id = p_group_id AND s.msg_id IS NOT NULL;
    RETURN v_leases + v_retry;
END
$fn$;
