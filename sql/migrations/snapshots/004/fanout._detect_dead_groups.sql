-- fanout._detect_dead_groups(p_now): dead-group detection with flapping
-- protection. An active pubsub group misses one heartbeat per full
-- heartbeat_timeout without a sign of life (fanout._liveness); it dies when
-- it has missed dead_after_misses in a row. Any sign of life resets the count,
-- so a group that misses, recovers and misses again never dies. A dead group
-- stops pinning storage (offset mode: it leaves the watermark); a heartbeat
-- or read resurrects it.
-- A group that fails is logged (fanout._maint_failed) and skipped.
-- Bounded: at most 1,000 groups per call. Returns how many groups changed
-- (miss count or status); call again while it returns > 0. Takes its own
-- lock row (fanout._try_lock).
-- Tables: fanout.consumer_group, fanout.member, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout._detect_dead_groups(p_now timestamptz DEFAULT now())
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    g       record;
    v_done  int := 0;
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    IF NOT fanout._try_lock('maint:detect_dead_groups') THEN
        RETURN 0;
    END IF;
    FOR g IN
        SELECT s.*, t.topic
        FROM (SELECT cg.group_id, cg.topic_id, cg.group_name, cg.missed_heartbeats, cg.dead_after_misses,
                     least(greatest(0, floor(extract(epoch FROM p_now - fanout._liveness(cg))
                                             / extract(epoch FROM cg.heartbeat_timeout))), 1000000)::int AS misses
              FROM fanout.consumer_group cg
              WHERE cg.status = 'active' AND cg.group_name IS NOT NULL) s
        JOIN fanout.topic t ON t.topic_id = s.topic_id
        WHERE s.misses <> s.missed_heartbeats
        ORDER BY s.group_id
        LIMIT 1000
    LOOP
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
    RETURN v_done;
END
$fn$;
