-- fanout._reconcile_stamps(p_topic_id, p_snap): reference mode: fixes the
-- required_groups stamp of the messages of every transaction listed in
-- fanout.stamp_pending for the topic that had ended when p_snap was taken,
-- and deletes those entries. A stamp is stale when its transaction was
-- writing while a group joined or left (the insert saw the old mask). The
-- rule is the one every group is promised: a group requires a message when
-- its transaction commits after the group's subscription committed, and not
-- once the group is dead or cancelled (its bit is released). So the new
-- stamp keeps the bits of the groups that are active or paused now, and adds
-- those whose join snapshot (consumer_group.join_snap) does not see the
-- transaction. Such a message may look COMPLETED before this runs; it is not,
-- and cleanup does not drop a partition that may hold it while its entry
-- exists (fanout._partition_droppable). Readers call this before scanning a
-- window that may hold these messages. While a membership change is in
-- flight (the topic's epoch sequence is ahead of the committed epoch) the
-- entries are restamped but kept: the change may add a group they owe.
-- Serialised per topic (advisory lock); rows are locked in id order, as acks
-- lock them. Returns the number of messages restamped.
-- Tables: fanout.stamp_pending, fanout.topic, fanout.topic_state,
-- fanout.consumer_group, fanout_data.m<topic_id>.
CREATE OR REPLACE FUNCTION fanout._reconcile_stamps(p_topic_id bigint, p_snap pg_snapshot)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_ended    xid8[];
    v_table    text;
    v_n        int;
    v_settled  boolean;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM fanout.stamp_pending s WHERE s.topic_id = p_topic_id) THEN
        RETURN 0;
    END IF;
    -- One reconciler per topic at a time (readers of different groups would
    -- otherwise lock the same entries in different orders).
    PERFORM pg_advisory_xact_lock(hashtextextended('fanout.reconcile:' || p_topic_id, 0));
    -- A membership change still in flight (its epoch bump is not committed)
    -- may yet require the group it adds: restamp for the groups known now,
    -- but keep the entries, so that a later pass adds that group too.
    SELECT s.epoch >= pg_sequence_last_value(s.epoch_seq) INTO v_settled
    FROM fanout.topic_state s WHERE s.topic_id = p_topic_id;
    -- Visible in p_snap = no longer running then (committed or rolled back).
    IF v_settled THEN
        WITH ended AS (
            DELETE FROM fanout.stamp_pending s
            WHERE s.topic_id = p_topic_id AND pg_visible_in_snapshot(s.txid, p_snap)
            RETURNING s.txid)
        SELECT array_agg(DISTINCT ended.txid) INTO v_ended FROM ended;
    ELSE
        SELECT array_agg(DISTINCT s.txid) INTO v_ended FROM fanout.stamp_pending s
        WHERE s.topic_id = p_topic_id AND pg_visible_in_snapshot(s.txid, p_snap);
    END IF;
    IF v_ended IS NULL THEN
        RETURN 0;
    END IF;
    SELECT t.data_table INTO STRICT v_table FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    -- Only rows whose stamp changes are locked (in id order) and written.
    EXECUTE format(
        'WITH r AS (
             SELECT x.txid, s.required_mask AS mask,
                    (SELECT coalesce(bit_or(1::bigint << g.bit_no), 0) FROM fanout.consumer_group g
                     WHERE g.topic_id = $2 AND g.bit_no IS NOT NULL AND g.status IN (''active'', ''paused'')
                       AND NOT pg_visible_in_snapshot(x.txid, g.join_snap)) AS add
             FROM unnest($1) AS x(txid), fanout.topic_state s WHERE s.topic_id = $2),
         t AS (
             SELECT m.id, r.mask & (m.required_groups | r.add) AS stamp
             FROM fanout_data.%1$I m JOIN r ON m.txid = r.txid
             WHERE m.required_groups <> r.mask & (m.required_groups | r.add)
             ORDER BY m.id
             FOR NO KEY UPDATE OF m)
         UPDATE fanout_data.%1$I m SET required_groups = t.stamp FROM t WHERE m.id = t.id', v_table)
        USING v_ended, p_topic_id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$fn$;
