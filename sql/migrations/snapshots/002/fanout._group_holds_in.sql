-- fanout._group_holds_in(p_group_id, p_part): whether the group still holds
-- a message of the partition that it has not finished with, outside its
-- stream: under an open lease, waiting for a retry (nacked, delayed,
-- replayed), or parked for its sequence's turn (fanout.seq_wait: never
-- handed out). Such a message pins the partition like an unread one. The
-- one definition of "holds" for fanout._group_passed and for the cleanup's
-- choice of groups to ask (fanout._partition_droppable,
-- fanout._cleanup_partitions). Index look-ups only.
-- Reads fanout.lease, fanout.retry, fanout.seq_wait.
CREATE OR REPLACE FUNCTION fanout._group_holds_in(p_group_id bigint, p_part fanout.partition)
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    SELECT EXISTS (SELECT 1 FROM fanout.lease l
                   WHERE l.group_id = p_group_id AND l.open_count > 0 AND l.min_id < p_part.hi_id)
        OR EXISTS (SELECT 1 FROM fanout.retry r
                   WHERE r.group_id = p_group_id AND r.message_id >= p_part.lo_id
                     AND r.message_id < p_part.hi_id)
        OR EXISTS (SELECT 1 FROM fanout.seq_wait w
                   WHERE w.group_id = p_group_id AND w.message_id >= p_part.lo_id
                     AND w.message_id < p_part.hi_id)
$fn$;
