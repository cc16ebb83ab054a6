-- fanout._stamp_fence(p_topic_id): reference mode: marks the start of a
-- change of the topic's group membership (a subscription, a resurrection, a
-- group leaving). Locks the topic's topic_state row (concurrent changes of
-- one topic queue here), bumps the mask's epoch in its sequence (outside
-- MVCC: every insert sees the bump at once and lists itself in
-- fanout.stamp_pending, fanout._required_groups_trigger), then lists the
-- transactions already writing to the topic, which passed that check
-- before the bump. Called before the changing transaction takes the
-- snapshot that defines what the group gets (consumer_group.join_snap), so
-- every transaction that snapshot does not see is either listed or lists
-- itself. Returns the new epoch (NULL when the topic is not in reference
-- mode or is being dropped). Tables: fanout.topic_state, fanout.topic,
-- fanout.stamp_pending; reads pg_locks.
CREATE OR REPLACE FUNCTION fanout._stamp_fence(p_topic_id bigint)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_seq   regclass;
    v_table text;
    v_epoch bigint;
BEGIN
    SELECT s.epoch_seq, t.data_table INTO v_seq, v_table
    FROM fanout.topic_state s JOIN fanout.topic t ON t.topic_id = s.topic_id
    WHERE s.topic_id = p_topic_id
    FOR UPDATE OF s;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_epoch := nextval(v_seq);
    INSERT INTO fanout.stamp_pending (topic_id, txid)
    SELECT p_topic_id, w.x
    FROM unnest(fanout._table_writers(format('fanout_data.%I', v_table)::regclass)) AS w(x)
    WHERE NOT EXISTS (SELECT 1 FROM fanout.stamp_pending s WHERE s.topic_id = p_topic_id AND s.txid = w.x);
    RETURN v_epoch;
END
$fn$;
