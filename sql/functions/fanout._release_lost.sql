-- fanout._release_lost(p_group_id, p_part, p_sequenced): releases what a
-- group holds in a partition that cleanup drops: its pending retries and
-- sequence waiters there are deleted and its open lease entries there are
-- taken away (a stale holder's ack of them raises PGQ11). On a
-- sequence-ordered topic the aggregates do not wait for what is gone: a lost
-- message that was its aggregate's current one counts as settled (as a dead
-- letter does: fanout._sequence_settled), and a lost waiter's sequence is
-- recorded in fanout.seq_lost, so that the aggregate moves past it when its
-- turn comes (fanout._sequence_advance). Called by fanout._cleanup_partitions
-- with the partition locked. Returns how many messages were released (an
-- ack that settled some meanwhile wins: those are not counted).
-- Tables: fanout.retry, fanout.seq_wait, fanout.seq_lost, fanout.lease,
-- fanout.seq_state, fanout.seq_done.
CREATE OR REPLACE FUNCTION fanout._release_lost(p_group_id bigint, p_part fanout.partition, p_sequenced boolean)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_retried bigint[];
    v_leased  bigint[];
    v_wait    bigint;
    v_n       bigint;
BEGIN
    WITH gone AS (
        DELETE FROM fanout.retry r
        WHERE r.group_id = p_group_id AND r.message_id >= p_part.lo_id AND r.message_id < p_part.hi_id
        RETURNING r.message_id)
    SELECT coalesce(array_agg(gone.message_id), '{}') INTO v_retried FROM gone;
    WITH gone AS (
        DELETE FROM fanout.seq_wait w
        WHERE w.group_id = p_group_id AND w.message_id >= p_part.lo_id AND w.message_id < p_part.hi_id
        RETURNING w.message_group, w.seq),
    lost AS (
        INSERT INTO fanout.seq_lost (group_id, message_group, seq)
        SELECT p_group_id, gone.message_group, gone.seq FROM gone
        ON CONFLICT DO NOTHING)
    SELECT count(*) INTO v_wait FROM gone;
    SELECT coalesce(array_agg(x), '{}') INTO v_leased
    FROM fanout.lease l, unnest(l.msg_ids) AS x
    WHERE l.group_id = p_group_id AND l.open_count > 0 AND x >= p_part.lo_id AND x < p_part.hi_id
      AND x <> ALL (l.settled) AND x <> ALL (l.reclaimed);
    SELECT coalesce(sum(fanout._lease_settle(o.lease_id, o.ids, true, false)), 0) INTO v_n
    FROM (SELECT l.lease_id, array_agg(x) AS ids
          FROM fanout.lease l, unnest(l.msg_ids) AS x
          WHERE l.group_id = p_group_id AND l.open_count > 0 AND x = ANY (v_leased)
          GROUP BY l.lease_id
          ORDER BY l.lease_id) o;
    IF p_sequenced THEN
        PERFORM fanout._sequence_settled(p_group_id, v_retried || v_leased);
    END IF;
    RETURN cardinality(v_retried) + v_wait + v_n;
END
$fn$;
