-- fanout.message_status(topic, message_id): where one message stands with
-- every group of its topic. One row per group (group_name NULL on queue
-- topics) with status: 'before_start' (the group started after it),
-- 'not_required' (reference mode: the message does not require the group),
-- 'pending' (not handed out yet), 'in_flight' (under a lease), 'retry'
-- (nacked, waiting), 'waiting' (sequence-ordered topic: for a lower sequence
-- of its aggregate), 'dead_letter', or 'acked' (handed out and settled);
-- passed is true when the group is done with it (offset mode: its position
-- has passed it). Reference mode adds required / completed (the group's bits)
-- and message_status: 'completed' (every required group acked), 'pending',
-- or 'unclaimed' (published while no group was subscribed); NULL otherwise
-- (also for a message below the switch id of a topic switched from offset
-- to reference: it carries no bits and is answered by position).
-- Rows are fanout.message_status_row (so inputs and outputs share names).
-- VOLATILE: its grant check (fanout._authorize) notes the caller.
-- Raises: PGQ01, PGQ03 (NULL id), PGQ18 (no such message retained).
-- Tables: fanout.consumer_group, fanout.kpart, fanout.lease, fanout.retry, fanout.seq_wait,
-- fanout.dead_letter, fanout_data.m<topic_id> (one partition) and, in reference
-- mode, fanout_data.m<topic_id>_done.
CREATE OR REPLACE FUNCTION fanout.message_status(topic text, message_id bigint)
RETURNS SETOF fanout.message_status_row
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    p_topic      ALIAS FOR $1;
    p_message_id ALIAS FOR $2;
    v_t    fanout.topic;
    v_txid xid8;
    v_req  bigint;
    v_done bigint;
    v_msg  text;
    v_kpart int;
    v_prio  int;
BEGIN
    PERFORM fanout._authorize($1, 'admin');
    v_t := fanout._topic(p_topic);
    IF p_message_id IS NULL THEN
        RAISE EXCEPTION 'message_id must not be NULL' USING ERRCODE = 'PGQ03';
    END IF;
    IF v_t.completion = 'reference' AND p_message_id >= coalesce(v_t.completion_switch_id, 0) THEN
        EXECUTE format('SELECT m.txid, m.required_groups FROM fanout_data.%I m WHERE m.id = $1',
                       v_t.data_table) INTO v_txid, v_req USING p_message_id;
        v_done := coalesce((SELECT d.bits FROM fanout._done_bits(v_t.data_table, ARRAY[p_message_id]) d), 0);
        IF EXISTS (SELECT 1 FROM fanout.stamp_pending s WHERE s.topic_id = v_t.topic_id AND s.txid = v_txid) THEN
            v_req := fanout._restamp(v_t.topic_id, v_txid, v_req);  -- what reconciliation will make of it
        END IF;
        v_msg := CASE WHEN v_req = 0 THEN 'unclaimed'
                      WHEN (v_req & ~v_done) = 0 THEN 'completed' ELSE 'pending' END;
    ELSE
        EXECUTE format('SELECT m.txid FROM fanout_data.%I m WHERE m.id = $1', v_t.data_table)
            INTO v_txid USING p_message_id;
    END IF;
    IF v_t.prioritized THEN
        EXECUTE format('SELECT coalesce(m.priority, 0) FROM fanout_data.%I m WHERE m.id = $1', v_t.data_table)
            INTO v_prio USING p_message_id;
    END IF;
    IF v_t.partitions IS NOT NULL THEN
        -- Partitioned: each group's position is that of the message's key partition.
        EXECUTE format('SELECT m.kpart FROM fanout_data.%I m WHERE m.id = $1', v_t.data_table)
            INTO v_kpart USING p_message_id;
    END IF;
    IF v_txid IS NULL THEN
        RAISE EXCEPTION 'message % of topic % does not exist or is no longer retained', p_message_id,
            quote_literal(v_t.topic) USING ERRCODE = 'PGQ18';
    END IF;
    RETURN QUERY
    SELECT v_t.topic, p_message_id, s.group_name, s.st,
           s.st IN ('before_start', 'not_required', 'acked', 'dead_letter'), s.req, s.done, v_msg
    FROM (SELECT g.group_id, g.group_name,
                 (v_req & (1::bigint << g.bit_no)) <> 0 AS req,
                 (v_done & (1::bigint << g.bit_no)) <> 0 AS done,
                 CASE
                     WHEN EXISTS (SELECT 1 FROM fanout.dead_letter d
                                  WHERE d.group_id = g.group_id AND d.message_id = p_message_id) THEN 'dead_letter'
                     WHEN EXISTS (SELECT 1 FROM fanout.retry r
                                  WHERE r.group_id = g.group_id AND r.message_id = p_message_id) THEN 'retry'
                     WHEN EXISTS (SELECT 1 FROM fanout.lease l
                                  WHERE l.group_id = g.group_id AND l.open_count > 0
                                    AND p_message_id = ANY (l.msg_ids) AND p_message_id <> ALL (l.settled)
                                    AND p_message_id <> ALL (l.reclaimed)) THEN 'in_flight'
                     WHEN EXISTS (SELECT 1 FROM fanout.seq_wait w
                                  WHERE w.group_id = g.group_id AND w.message_id = p_message_id) THEN 'waiting'
                     -- A latest group starts at the first id assigned after it joined
                     -- (joined_id); the others at effective_start_id. A message whose
                     -- transaction the subscription's snapshot did not see is owed
                     -- whatever its id.
                     WHEN p_message_id < CASE WHEN g.start_position = 'latest' THEN g.joined_id
                                              ELSE coalesce(g.effective_start_id, 0) END
                          AND pg_visible_in_snapshot(v_txid, g.join_snap) THEN 'before_start'
                     WHEN g.bit_no IS NOT NULL AND (v_done & (1::bigint << g.bit_no)) <> 0 THEN 'acked'
                     WHEN g.bit_no IS NOT NULL AND (v_req & (1::bigint << g.bit_no)) = 0 THEN 'not_required'
                     -- A window read by priority keeps (cur_txid, cur_id) at its
                     -- start (fanout._window_walk); its priority cursor
                     -- (level 9 down to 0, then (txid, id)) says what of the window
                     -- was handed out: what is not held or waiting (above) is acked.
                     WHEN g.prio_level IS NOT NULL
                          AND pg_visible_in_snapshot(v_txid, g.win_hi) AND NOT pg_visible_in_snapshot(v_txid, g.win_lo)
                          AND (v_txid, p_message_id) > (g.cur_txid, g.cur_id)
                          AND (v_prio > g.prio_level
                               OR (v_prio = g.prio_level AND (v_txid, p_message_id) <= (g.prio_txid, g.prio_id)))
                         THEN 'acked'
                     WHEN NOT pg_visible_in_snapshot(v_txid, g.win_lo)
                          AND ((v_txid, p_message_id) > (g.cur_txid, g.cur_id)
                               OR NOT pg_visible_in_snapshot(v_txid, g.win_hi))
                         THEN 'pending'
                     ELSE 'acked'
                 END AS st
          FROM (SELECT g0.group_id, g0.group_name, g0.bit_no, g0.start_position, g0.joined_id,
                       g0.effective_start_id, g0.join_snap, g0.topic_id, g0.status, g0.prio_level, g0.prio_txid, g0.prio_id,
                       coalesce(k.win_lo, g0.win_lo) AS win_lo, coalesce(k.win_hi, g0.win_hi) AS win_hi,
                       coalesce(k.cur_txid, g0.cur_txid) AS cur_txid, coalesce(k.cur_id, g0.cur_id) AS cur_id
                FROM fanout.consumer_group g0
                LEFT JOIN fanout.kpart k ON k.group_id = g0.group_id AND k.kpart = v_kpart) g
          WHERE g.topic_id = v_t.topic_id AND g.status <> 'cancelled') s
    ORDER BY s.group_name NULLS FIRST;
END
$fn$;
