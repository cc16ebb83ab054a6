-- fanout._group_passed(p_g, p_part): whether the group is done with every row
-- of a partition: it holds none of them (fanout._group_holds_in: open lease,
-- pending retry or sequence waiter) and its stream has no unread message in
-- it (fanout._group_unread, index look-ups only; lying below the group's
-- start is not enough: a transaction that took an id there before the
-- subscription may commit after it). Only exact for rows whose transactions
-- have ended: callers that drop the partition lock it first and ask again.
-- Reads fanout.lease, fanout.retry, fanout.seq_wait and the partition.
CREATE OR REPLACE FUNCTION fanout._group_passed(p_g fanout.consumer_group, p_part fanout.partition)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    IF fanout._group_holds_in(p_g.group_id, p_part) THEN
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
