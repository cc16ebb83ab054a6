-- fanout._group_passed(p_g, p_part): whether the group is done with every row
-- of a partition: no open lease, pending retry or sequence waiter
-- (fanout.seq_wait) of the group points into it
-- and its stream has no unread message in it (fanout._group_unread, index
-- look-ups only; lying below the group's start is not enough: a transaction
-- that took an id there before the subscription may commit after it). Only exact for
-- rows whose transactions have ended: callers that drop the partition lock
-- it first and ask again.
-- Reads fanout.lease, fanout.retry, fanout.seq_wait and the partition.
CREATE OR REPLACE FUNCTION fanout._group_passed(p_g fanout.consumer_group, p_part fanout.partition)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF EXISTS (SELECT 1 FROM fanout.lease l
               WHERE l.group_id = p_g.group_id AND l.open_count > 0 AND l.min_id < p_part.hi_id)
       OR EXISTS (SELECT 1 FROM fanout.retry r
                  WHERE r.group_id = p_g.group_id AND r.message_id >= p_part.lo_id
                    AND r.message_id < p_part.hi_id)
       OR EXISTS (SELECT 1 FROM fanout.seq_wait w
                  WHERE w.group_id = p_g.group_id AND w.message_id >= p_part.lo_id
                    AND w.message_id < p_part.hi_id) THEN
        RETURN false;
    END IF;
    -- Every txid in a closed partition is below its bound: a bound at or
    -- below the xmin of the group's window start means every row was in an
    -- earlier window. Most groups pass this way, without scanning the
    -- partition (cleanup asks every pinning group about every candidate).
    IF p_part.txid_bound IS NOT NULL AND p_part.txid_bound <= pg_snapshot_xmin(p_g.win_lo) THEN
        RETURN true;
    END IF;
    RETURN (SELECT u.messages = 0 FROM fanout._group_unread(p_g.group_id, 1, p_part.relname) u);
END
$fn$;
