-- fanout._group_idle(p_t, p_group_name, p_now): true when a read by this group
-- would hand out nothing and owes no heartbeat write: the group is active,
-- its last heartbeat is fresh, no lease of it has expired with messages
-- left, no retry is due, no stamp waits to be reconciled (reference mode)
-- and its stream has no unread message. Lets idle
-- polls return without locking or writing anything (no xid, no WAL, no dead
-- row versions while a long transaction holds xmin). Anything else (unknown,
-- paused, dead or cancelled group) is false: the full read handles it.
-- Reads fanout.consumer_group, fanout.lease, fanout.retry, fanout.bitmap_job
-- and the topic's message table (index look-ups).
CREATE OR REPLACE FUNCTION fanout._group_idle(p_t fanout.topic, p_group_name text, p_now timestamptz)
RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_g fanout.consumer_group;
BEGIN
    IF p_t.semantics = 'queue' THEN
        SELECT * INTO v_g FROM fanout.consumer_group g WHERE g.topic_id = p_t.topic_id AND g.group_name IS NULL;
    ELSE
        SELECT * INTO v_g FROM fanout.consumer_group g WHERE g.topic_id = p_t.topic_id AND g.group_name = p_group_name;
    END IF;
    IF v_g.group_id IS NULL OR v_g.status <> 'active'
       OR v_g.last_heartbeat < p_now - least(v_g.heartbeat_timeout / 10, interval '5 seconds') THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM fanout.lease l
               WHERE l.group_id = v_g.group_id AND l.open_count > 0 AND l.expires_at <= p_now)
       OR EXISTS (SELECT 1 FROM fanout.retry r WHERE r.group_id = v_g.group_id AND r.not_before <= p_now) THEN
        RETURN false;
    END IF;
    IF p_t.sequence_ordering AND EXISTS (SELECT 1 FROM fanout.seq_done d WHERE d.group_id = v_g.group_id) THEN
        RETURN false;  -- acks to apply: they may release waiters (fanout._sequence_advance)
    END IF;
    IF v_g.bit_no IS NOT NULL
       AND EXISTS (SELECT 1 FROM fanout.stamp_pending s WHERE s.topic_id = p_t.topic_id) THEN
        RETURN false;  -- stamps to reconcile first (fanout._reconcile_stamps)
    END IF;
    IF v_g.bit_no IS NOT NULL
       AND EXISTS (SELECT 1 FROM fanout.bitmap_job j
                   WHERE j.group_id = v_g.group_id AND j.kind = 'backfill'
                     AND j.status IN ('not_started', 'in_progress')) THEN
        RETURN true;  -- it reads nothing until its backfill completes
    END IF;
    RETURN (SELECT u.messages = 0 FROM fanout._group_unread(v_g.group_id, 1) u);
END
$fn$;
