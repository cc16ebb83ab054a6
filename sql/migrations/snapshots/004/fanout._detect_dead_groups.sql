-- fanout._detect_dead_groups(p_now): dead-group detection with flapping
-- protection. An active pubsub group misses one heartbeat per full
-- heartbeat_timeout without a sign of life (fanout._liveness); it dies when
-- it has missed dead_after_misses in a row. Any sign of life resets the count,
-- so a group that misses, recovers and misses again never dies. A dead group
-- stops pinning storage (offset mode: it leaves the watermark); a heartbeat
-- or read resurrects it.
-- A group that fails is logged (fanout._maint_failed) and skipped.
-- Bounded: it works through the active groups in slices of 1,000 (by
-- group id, resuming after the last one on the next call: fanout.lock_row's
-- resume_after), and begins no group once the call has run 250 ms: counting
-- misses reads each group's members, and 15,000 groups in one call took
-- seconds. Returns how many groups changed (miss count or status), plus
-- one while the pass over the groups is not finished (a round that began
-- in the middle of a pass ends at the last group); call again while it
-- returns > 0. Takes its own lock row (fanout._try_lock).
-- Tables: fanout.consumer_group, fanout.member, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout._detect_dead_groups(p_now timestamptz DEFAULT now())
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    g        record;
    v_done   int := 0;
    v_after  bigint;
    v_end    bigint;
    v_more   boolean;
    c_slice  constant int := 1000;
    c_budget constant interval := '250 ms';
    v_start  timestamptz := clock_timestamp();
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    IF NOT fanout._try_lock('maint:detect_dead_groups') THEN
        RETURN 0;
    END IF;
    SELECT coalesce(l.resume_after, 0) INTO v_after FROM fanout.lock_row l WHERE l.name = 'maint:detect_dead_groups';
    v_after := coalesce(v_after, 0);
    -- This call's slice: the next 1,000 active groups by id.
    SELECT max(x.group_id), count(*) = c_slice INTO v_end, v_more
    FROM (SELECT cg.group_id FROM fanout.consumer_group cg
          WHERE cg.status = 'active' AND cg.group_name IS NOT NULL AND cg.group_id > v_after
          ORDER BY cg.group_id LIMIT c_slice) x;
    FOR g IN
        SELECT s.*, t.topic
        FROM (SELECT cg.group_id, cg.topic_id, cg.group_name, cg.missed_heartbeats, cg.dead_after_misses,
                     least(greatest(0, floor(extract(epoch FROM p_now - fanout._liveness(cg))
                                             / extract(epoch FROM cg.heartbeat_timeout))), 1000000)::int AS misses
              FROM fanout.consumer_group cg
              WHERE cg.status = 'active' AND cg.group_name IS NOT NULL
                AND cg.group_id > v_after AND cg.group_id <= v_end) s
        JOIN fanout.topic t ON t.topic_id = s.topic_id
        WHERE s.misses <> s.missed_heartbeats
        ORDER BY s.group_id
    LOOP
        IF v_done > 0 AND clock_timestamp() - v_start > c_budget THEN
            v_end := g.group_id - 1;  -- from this group on, on the next call
            v_more := true;
            EXIT;
        END IF;
        BEGIN  -- one group's failure is logged and skipped (fanout._maint_failed)
        -- A group locked by a reader is alive; skip it.
        PERFORM 1 FROM fanout.consumer_group cg WHERE cg.group_id = g.group_id FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        IF g.misses >= g.dead_after_misses THEN
            -- Re-check under the lock: a read may have just come in.
            UPDATE fanout.consumer_group cg
            SET status = 'dead', missed_heartbeats = g.misses, status_changed_at = clock_timestamp()
            WHERE cg.group_id = g.group_id AND cg.status = 'active'
              AND p_now - fanout._liveness(cg) >= cg.heartbeat_timeout * cg.dead_after_misses;
            IF FOUND THEN
                INSERT INTO fanout.event_log (topic, group_name, kind, detail)
                VALUES (g.topic, g.group_name, 'group_dead', jsonb_build_object('missed_heartbeats', g.misses));
            END IF;
        ELSE
            UPDATE fanout.consumer_group cg SET missed_heartbeats = g.misses
            WHERE cg.group_id = g.group_id AND cg.status = 'active';
        END IF;
        v_done := v_done + 1;
        EXCEPTION WHEN OTHERS THEN
            PERFORM fanout._maint_failed('fanout._detect_dead_groups', g.topic_id, g.group_id, SQLSTATE, SQLERRM);
        END;
    END LOOP;
    UPDATE fanout.lock_row l SET resume_after = CASE WHEN v_more THEN v_end ELSE 0 END
    WHERE l.name = 'maint:detect_dead_groups';
    RETURN v_done + CASE WHEN v_more THEN 1 ELSE 0 END;
END
$fn$;
