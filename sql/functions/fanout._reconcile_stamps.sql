-- fanout._reconcile_stamps(p_topic_id, p_snap): reference mode, best effort
-- and never waiting: restamps (fanout._restamp) the messages of the
-- transactions listed in fanout.stamp_pending for the topic that had ended
-- when p_snap was taken, and deletes their entries. A stamp is stale when
-- its transaction was writing while a group joined or left (the insert saw
-- the old mask). Until its entry is gone, readers do not pass such a
-- transaction (fanout._window_walk counts it as running) and cleanup keeps
-- the partitions that may hold it (fanout._partition_droppable), so a
-- message that looks COMPLETED by its stale stamp is not taken for it.
-- It does nothing when another session is reconciling the topic (lock row,
-- fanout._try_lock), skips transactions with a row locked by someone else (an
-- ack in a business transaction: retried on a later call), and keeps the
-- entries while a membership change is in flight (the topic's epoch
-- sequence ahead of the committed epoch while its topic_state row is
-- locked): that change may add a group they owe. A sequence ahead with the
-- row free means the change rolled back: the epoch catches up here.
-- Returns the number of messages restamped.
-- Tables: fanout.stamp_pending, fanout.topic, fanout.topic_state,
-- fanout.consumer_group, fanout_data.m<topic_id>.
CREATE OR REPLACE FUNCTION fanout._reconcile_stamps(p_topic_id bigint, p_snap pg_snapshot)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_table   text;
    v_n       int := 0;
    v_settled boolean;
    v_live    bigint;
    v_ended   xid8[];
    v_done    xid8[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM fanout.stamp_pending s WHERE s.topic_id = p_topic_id)
       OR NOT fanout._try_lock('reconcile:' || p_topic_id) THEN
        RETURN 0;
    END IF;
    SELECT s.epoch >= pg_sequence_last_value(s.epoch_seq), pg_sequence_last_value(s.epoch_seq)
    INTO v_settled, v_live
    FROM fanout.topic_state s WHERE s.topic_id = p_topic_id;
    IF NOT v_settled THEN
        -- No change holds the row: the one that bumped the sequence rolled back.
        UPDATE fanout.topic_state s SET epoch = v_live
        FROM (SELECT l.topic_id FROM fanout.topic_state l WHERE l.topic_id = p_topic_id
              FOR UPDATE SKIP LOCKED) free
        WHERE s.topic_id = free.topic_id;
        v_settled := FOUND;
    END IF;
    v_ended := ARRAY(SELECT DISTINCT s.txid FROM fanout.stamp_pending s
                     WHERE s.topic_id = p_topic_id AND pg_visible_in_snapshot(s.txid, p_snap));
    IF cardinality(v_ended) = 0 THEN
        RETURN 0;
    END IF;
    SELECT t.data_table INTO STRICT v_table FROM fanout.topic t WHERE t.topic_id = p_topic_id;
    -- The transactions whose rows this call can all lock (in id order).
    EXECUTE format(
        'WITH locked AS (SELECT m.txid FROM fanout_data.%1$I m WHERE m.txid = ANY ($1)
                         ORDER BY m.id FOR NO KEY UPDATE SKIP LOCKED),
              have AS (SELECT l.txid, count(*) AS n FROM locked l GROUP BY l.txid),
              whole AS (SELECT m.txid, count(*) AS n FROM fanout_data.%1$I m WHERE m.txid = ANY ($1) GROUP BY m.txid)
         SELECT ARRAY(SELECT x FROM unnest($1) AS x
                      WHERE coalesce((SELECT w.n FROM whole w WHERE w.txid = x), 0)
                          = coalesce((SELECT h.n FROM have h WHERE h.txid = x), 0))', v_table)
        INTO v_done USING v_ended;
    IF cardinality(v_done) = 0 THEN
        RETURN 0;
    END IF;
    EXECUTE format(
        'UPDATE fanout_data.%I m SET required_groups = fanout._restamp($2, m.txid, m.required_groups)
         WHERE m.txid = ANY ($1) AND m.required_groups <> fanout._restamp($2, m.txid, m.required_groups)', v_table)
        USING v_done, p_topic_id;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_settled THEN
        DELETE FROM fanout.stamp_pending s WHERE s.topic_id = p_topic_id AND s.txid = ANY (v_done);
    END IF;
    RETURN v_n;
END
$fn$;
