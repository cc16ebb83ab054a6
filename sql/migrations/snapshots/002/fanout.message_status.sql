-- fanout.message_status(p_topic, p_message_id): where one message stands with
-- every group of its topic (offset mode: whether each group's position has
-- passed it). One row per group (group_name NULL on queue topics) with
-- status: 'before_start' (the group started after it), 'pending' (not handed
-- out yet), 'in_flight' (under a lease), 'retry' (nacked, waiting),
-- 'dead_letter', or 'acked' (handed out and settled); passed is true when the
-- group is done with it.
-- (Its inputs are p_-named because its output columns are topic and message_id.)
-- Raises: PGQ01, PGQ03 (NULL id), PGQ18 (no such message retained).
-- Tables: fanout.consumer_group, fanout.lease, fanout.retry,
-- fanout.dead_letter, fanout_data.m<topic_id> (scans one partition).
CREATE OR REPLACE FUNCTION fanout.message_status(p_topic text, p_message_id bigint)
RETURNS TABLE(topic text, message_id bigint, group_name text, status text, passed boolean)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_t    fanout.topic;
    v_txid xid8;
BEGIN
    v_t := fanout._topic($1);
    IF $2 IS NULL THEN
        RAISE EXCEPTION 'message_id must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    EXECUTE format('SELECT m.txid FROM fanout_data.%I m WHERE m.id = $1', v_t.data_table) INTO v_txid USING $2;
    IF v_txid IS NULL THEN
        RAISE EXCEPTION 'message % of topic % does not exist or is no longer retained', $2, quote_literal(v_t.topic)
            USING ERRCODE = 'PGQ18';
    END IF;
    RETURN QUERY
    SELECT v_t.topic, $2, s.group_name, s.st, s.st IN ('before_start', 'acked', 'dead_letter')
    FROM (SELECT g.group_id, g.group_name,
                 CASE
                     WHEN $2 < coalesce(g.effective_start_id, 0) THEN 'before_start'
                     WHEN EXISTS (SELECT 1 FROM fanout.dead_letter d
                                  WHERE d.group_id = g.group_id AND d.message_id = $2) THEN 'dead_letter'
                     WHEN EXISTS (SELECT 1 FROM fanout.retry r
                                  WHERE r.group_id = g.group_id AND r.message_id = $2) THEN 'retry'
                     WHEN EXISTS (SELECT 1 FROM fanout.lease l
                                  WHERE l.group_id = g.group_id AND l.open_count > 0 AND $2 = ANY (l.msg_ids)
                                    AND $2 <> ALL (l.settled) AND $2 <> ALL (l.reclaimed)) THEN 'in_flight'
                     WHEN NOT pg_visible_in_snapshot(v_txid, g.win_lo)
                          AND ((v_txid, $2) > (g.cur_txid, g.cur_id) OR NOT pg_visible_in_snapshot(v_txid, g.win_hi))
                         THEN 'pending'
                     ELSE 'acked'
                 END AS st
          FROM fanout.consumer_group g
          WHERE g.topic_id = v_t.topic_id AND g.status <> 'cancelled') s
    ORDER BY s.group_name NULLS FIRST;
END
$fn$;
