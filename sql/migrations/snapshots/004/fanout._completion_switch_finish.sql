-- fanout._completion_switch_finish(p_t, p_now): finishes a topic's switch from
-- reference to offset completion (fanout._completion_switch), one step per
-- call; fanout._cleanup_partitions calls it for a topic whose switch is in
-- progress and leaves the topic's storage alone until it returns true.
--   1. The first call records the transactions running now
--      (completion_switch_vxids): every transaction that began before the
--      switch committed and may still use the topic's page function as it
--      was compiled before (it filters by the group's bit).
--   2. Later calls wait for them to end (fanout._vxids_block, as partition
--      rotation does: after 10 minutes from the switch on the p_now clock,
--      only those holding the topic's table) and for any bitmap job still
--      running (one started before the switch committed), then clear every
--      group's bit, one group row at a time and never waiting (a group whose
--      row a read holds is done by a later call).
--   3. Once no group has a bit: the stamps waiting to be reconciled and the
--      topic's mask go (fanout.stamp_pending; topic_state keeps its row with
--      mask 0: the insert trigger then stamps 0 and lists nothing), completion_switch_done_at is
--      set and an event_log row written; returns true.
-- The completion table stays until cleanup has dropped the partitions it
-- covers (fanout._cleanup_partitions drops it with the last one).
-- Tables: fanout.topic, fanout.consumer_group, fanout.bitmap_job,
-- fanout.stamp_pending, fanout.topic_state, fanout.event_log; reads pg_locks.
CREATE OR REPLACE FUNCTION fanout._completion_switch_finish(p_t fanout.topic, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_vxids text[];
    v_id    bigint;
BEGIN
    IF p_t.completion_switch_id IS NULL OR p_t.completion_switch_done_at IS NOT NULL THEN
        RETURN true;
    END IF;
    SELECT t.completion_switch_vxids INTO v_vxids FROM fanout.topic t WHERE t.topic_id = p_t.topic_id;
    IF v_vxids IS NULL THEN
        UPDATE fanout.topic t SET completion_switch_vxids = fanout._running_vxids()
        WHERE t.topic_id = p_t.topic_id;
        RETURN false;
    END IF;
    IF fanout._vxids_block(v_vxids, p_t.completion_switched_at, p_now, interval '10 minutes',
                           format('fanout_data.%I', p_t.data_table)::regclass) THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM fanout.bitmap_job j JOIN fanout.consumer_group g ON g.group_id = j.group_id
               WHERE g.topic_id = p_t.topic_id AND j.status IN ('not_started', 'in_progress')) THEN
        RETURN false;
    END IF;
    FOR v_id IN
        SELECT g.group_id FROM fanout.consumer_group g
        WHERE g.topic_id = p_t.topic_id AND g.bit_no IS NOT NULL
        ORDER BY g.group_id FOR NO KEY UPDATE SKIP LOCKED
    LOOP
        UPDATE fanout.consumer_group g SET bit_no = NULL WHERE g.group_id = v_id;
    END LOOP;
    IF EXISTS (SELECT 1 FROM fanout.consumer_group g WHERE g.topic_id = p_t.topic_id AND g.bit_no IS NOT NULL) THEN
        RETURN false;
    END IF;
    DELETE FROM fanout.stamp_pending s WHERE s.topic_id = p_t.topic_id;
    -- The mask goes, the row stays (with its epoch: the sequence's): the
    -- insert trigger, still on the table, stamps 0 and lists nothing; a row
    -- it could not see would make it list every insert.
    UPDATE fanout.topic_state s SET required_mask = 0, epoch = greatest(s.epoch, pg_sequence_last_value(s.epoch_seq)),
        refreshed_at = clock_timestamp()
    WHERE s.topic_id = p_t.topic_id;
    UPDATE fanout.topic t SET completion_switch_done_at = clock_timestamp(), completion_switch_vxids = NULL
    WHERE t.topic_id = p_t.topic_id;
    INSERT INTO fanout.event_log (topic, kind, detail)
    VALUES (p_t.topic, 'completion_switched',
            jsonb_build_object('to', p_t.completion, 'switch_id', p_t.completion_switch_id));
    RETURN true;
END
$fn$;
