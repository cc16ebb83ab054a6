-- fanout._release_holds(p_group_id): gives up everything a group holds: its
-- open leases are closed (their unsettled messages count as taken away, so a
-- stale holder's ack raises PGQ11) and its pending retries and sequence
-- waiters are deleted (sequence-ordered topics keep each aggregate's next_seq,
-- after applying the acks and dead letters no read has applied yet).
-- Returns how many messages were released.
-- Tables: fanout.kpart, fanout.lease, fanout.retry, fanout.seq_wait, fanout.seq_done, fanout.seq_state.
CREATE OR REPLACE FUNCTION fanout._release_holds(p_group_id bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_leases bigint;
    v_retry  bigint;
BEGIN
    -- Partitioned topics: reads lock their key partition's row, not the
    -- group's, and hand out its page under that lock. Taking the rows first
    -- waits for a read in flight, so its page is among the leases below
    -- (looked for after the wait: a read-committed statement's snapshot),
    -- not left open behind a partition whose lease_id a caller then clears.
    PERFORM 1 FROM fanout.kpart k WHERE k.group_id = p_group_id ORDER BY k.kpart FOR UPDATE;
    SELECT coalesce(sum(fanout._lease_settle(o.lease_id, o.ids, true, true)), 0) INTO v_leases
    FROM (SELECT l.lease_id,
                 ARRAY(SELECT x FROM unnest(l.msg_ids) AS x
                       WHERE x <> ALL (l.settled) AND x <> ALL (l.reclaimed)) AS ids
          FROM fanout.lease l
          WHERE l.group_id = p_group_id AND l.open_count > 0
          ORDER BY l.lease_id
          FOR UPDATE) o;
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
