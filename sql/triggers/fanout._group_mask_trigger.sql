-- fanout._group_mask_trigger(): AFTER row trigger on fanout.consumer_group.
-- When a reference-mode group is added, removed, or changes status or bit,
-- recomputes its topic's required_mask in fanout.topic_state: the bits of
-- the groups that are active or paused (paused groups will resume, so new
-- messages keep requiring them; dead and cancelled groups are released).
-- It also starts the group's bitmap jobs: a release when it dies or is
-- cancelled, a backfill of what it missed (the newest max_backfill retained
-- messages since it joined) when a dead group comes back.
-- A change of the mask goes through fanout._stamp_fence (epoch bump, writers
-- listed in fanout.stamp_pending) and stores the new epoch with the mask.
-- Concurrent changes of one topic are serialised on its topic_state row,
-- and the mask is computed after that lock, so it sees the change that
-- committed first.
CREATE OR REPLACE FUNCTION fanout._group_mask_trigger()
RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_topic_id bigint := CASE WHEN TG_OP = 'DELETE' THEN OLD.topic_id ELSE NEW.topic_id END;
    v_old      bigint;
    v_mask     bigint;
    v_epoch    bigint;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.status IS NOT DISTINCT FROM OLD.status
       AND NEW.bit_no IS NOT DISTINCT FROM OLD.bit_no THEN
        RETURN NULL;
    END IF;
    IF (CASE WHEN TG_OP = 'DELETE' THEN OLD.bit_no ELSE NEW.bit_no END) IS NULL THEN
        RETURN NULL;  -- offset mode
    END IF;
    SELECT s.required_mask INTO v_old
    FROM fanout.topic_state s WHERE s.topic_id = v_topic_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;  -- the topic is being dropped
    END IF;
    v_mask := fanout._required_mask(v_topic_id);
    IF v_mask IS DISTINCT FROM v_old THEN
        v_epoch := fanout._stamp_fence(v_topic_id);
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
