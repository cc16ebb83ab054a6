-- fanout._partition_floor(p_topic_id, p_txid): the lowest message id that can
-- carry a txid >= p_txid: the start of the oldest partition that was still
-- open, or closed with a txid bound above p_txid. Scans add "id >= floor" so
-- that closed partitions are pruned from every page. (plpgsql, not SQL: a SQL
-- function with SET is planned again on every call.) Reads fanout.partition.
CREATE OR REPLACE FUNCTION fanout._partition_floor(p_topic_id bigint, p_txid xid8)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    RETURN (SELECT coalesce(min(p.lo_id), 0)
            FROM fanout.partition p
            WHERE p.topic_id = p_topic_id AND (p.txid_bound IS NULL OR p.txid_bound > p_txid));
END
$fn$;
