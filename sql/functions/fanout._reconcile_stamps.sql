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
-- window that may hold these messages. Rows are locked in id order, as acks
-- lock them. Returns the number of messages restamped.
-- Tables: fanout.stamp_pending, fanout.topic, fanout.topic_state,
-- fanout.consumer_group, fanout_data.m<topic_id>.
CREATE OR REPLACE FUNCTION fanout._reconcile_stamps(p_topic_id bigint, p_snap pg_snapshot)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_ended xid8[];
    v_table text;
    v_n     int;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM fanout.stamp_pending s WHERE s.topic_id = p_topic_id) THEN
        RETURN 0;
    END IF;
    -- Visible in p_snap = no longer running then (committed or rolled back).
    WITH ended AS (
        DELETE FROM fanout.stamp_pending s
        WHERE s.topic_id = p_topic_id AND pg_visible_in_snapshot(s.txid, p_snap)
        RETURNING s.txid)
    SELECT array_agg(ended.txid) INTO v_ended FROM ended;
    IF v_ended IS NULL THEN
        RETURN 0;
    END IF;
    SELECT t.data_table INTO STRICT v_table FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM fanout_data.%I m WHERE m.txid = ANY ($1)
                                          ORDER BY m.id FOR NO KEY UPDATE) s', v_table)
        INTO v_n USING v_ended;
    EXECUTE format(
        'UPDATE fanout_data.%I m SET required_groups = r.mask & (m.required_groups | r.add)
         FROM (SELECT x.txid, s.required_mask AS mask,
                      (SELECT coalesce(bit_or(1::bigint << g.bit_no), 0) FROM fanout.consumer_group g
                       WHERE g.topic_id = $2 AND g.bit_no IS NOT NULL AND g.status IN (''active'', ''paused'')
                         AND NOT pg_visible_in_snapshot(x.txid, g.join_snap)) AS add
               FROM unnest($1) AS x(txid), fanout.topic_state s WHERE s.topic_id = $2) r
         WHERE m.txid = r.txid AND m.required_groups <> r.mask & (m.required_groups | r.add)', v_table)
        USING v_ended, p_topic_id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$fn$;
