-- fanout._group_mask_trigger(): AFTER row trigger on fanout.consumer_group.
-- When a reference-mode group is added, removed, or changes status or bit,
-- recomputes its topic's required_mask in fanout.topic_state: the bits of
-- the groups that are active or paused (paused groups will resume, so new
-- messages keep requiring them; dead and cancelled groups are released).
-- It also starts the group's bitmap jobs: a release when it dies or is
-- cancelled, a backfill of what it missed (the newest max_backfill retained
-- messages since it joined) when a dead group comes back.
-- A change of the mask bumps the topic's epoch (a sequence: every insert sees
-- the bump at once, committed or not) and lists in fanout.stamp_pending the
-- transactions writing to the topic now: their rows may carry the old mask
-- and commit after this change. Inserts that check the epoch after the bump
-- list themselves (fanout._required_groups_trigger). Concurrent changes of
-- one topic are serialised on its topic_state row, and the mask is computed
-- after that lock, so it sees the change that committed first.
CREATE OR REPLACE FUNCTION fanout._group_mask_trigger()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_topic_id bigint := CASE WHEN TG_OP = 'DELETE' THEN OLD.topic_id ELSE NEW.topic_id END;
    v_old      bigint;
    v_seq      regclass;
    v_mask     bigint;
    v_epoch    bigint;
    v_table    text;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.status IS NOT DISTINCT FROM OLD.status
       AND NEW.bit_no IS NOT DISTINCT FROM OLD.bit_no THEN
        RETURN NULL;
    END IF;
    IF (CASE WHEN TG_OP = 'DELETE' THEN OLD.bit_no ELSE NEW.bit_no END) IS NULL THEN
        RETURN NULL;  -- offset mode
    END IF;
    SELECT s.required_mask, s.epoch_seq INTO v_old, v_seq
    FROM fanout.topic_state s WHERE s.topic_id = v_topic_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;  -- the topic is being dropped
    END IF;
    v_mask := fanout._required_mask(v_topic_id);
    IF v_mask IS DISTINCT FROM v_old THEN
        v_epoch := nextval(v_seq);
        SELECT t.data_table INTO v_table FROM fanout.topic t WHERE t.topic_id = v_topic_id;
        IF v_table IS NOT NULL THEN  -- NULL while the topic itself is being dropped
            INSERT INTO fanout.stamp_pending (topic_id, txid)
            SELECT v_topic_id, w.x
            FROM unnest(fanout._table_writers(format('fanout_data.%I', v_table)::regclass)) AS w(x)
            ON CONFLICT DO NOTHING;
        END IF;
        UPDATE fanout.topic_state s
        SET required_mask = v_mask, epoch = v_epoch, refreshed_at = clock_timestamp()
        WHERE s.topic_id = v_topic_id;
    END IF;
    IF TG_OP = 'UPDATE' AND NEW.status IN ('dead', 'cancelled') AND OLD.status IN ('active', 'paused') THEN
        PERFORM fanout._start_bitmap_job(NEW.group_id, 'release', 0, 10000);
    ELSIF TG_OP = 'UPDATE' AND NEW.status = 'active' AND OLD.status = 'dead' THEN
        PERFORM fanout._start_bitmap_job(NEW.group_id, 'backfill',
            fanout._backfill_from(t, NEW.joined_id, NEW.max_backfill), 10000, 'all_retained')
        FROM fanout.topic t WHERE t.topic_id = v_topic_id;
    END IF;
    RETURN NULL;
END
$fn$;
