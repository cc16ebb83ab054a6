-- fanout._cleanup_groups(p_now): subscription cleanup. Deletes groups that
-- were cancelled more than the topic's zombie_ttl ago, and groups dead for
-- longer than max_retention (everything they could still read is gone), with
-- their leases, retries, dead letters and members. A deleted group's name can
-- be subscribed again.
-- Bounded: at most 1,000 groups per call. Returns how many were deleted; call
-- again while it returns > 0. Takes its own lock row (fanout._try_lock). Never waits for
-- a group's row (a drop_topic left open in a transaction holds every row of
-- its topic's groups): a locked group is left to a later call.
-- Tables: fanout.consumer_group (cascading), fanout.lease, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout._cleanup_groups(p_now timestamptz DEFAULT now())
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_n    int;
    v_gone bigint[];
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    IF NOT fanout._try_lock('maint:cleanup_groups') THEN
        RETURN 0;
    END IF;
    WITH gone AS (
        DELETE FROM fanout.consumer_group g
        USING fanout.topic t
        WHERE t.topic_id = g.topic_id
          AND g.group_id IN (
            SELECT cg.group_id FROM fanout.consumer_group cg JOIN fanout.topic t ON t.topic_id = cg.topic_id
            WHERE (cg.status = 'cancelled' AND p_now - cg.status_changed_at > t.zombie_ttl)
               OR (cg.status = 'dead' AND p_now - cg.status_changed_at > t.max_retention)
            LIMIT 1000
            FOR UPDATE OF cg SKIP LOCKED)
          -- again on the row deleted (a read may have resurrected a dead group meanwhile)
          AND ((g.status = 'cancelled' AND p_now - g.status_changed_at > t.zombie_ttl)
               OR (g.status = 'dead' AND p_now - g.status_changed_at > t.max_retention))
        RETURNING g.group_id, t.topic, g.group_name, g.status),
    logged AS (
        INSERT INTO fanout.event_log (topic, group_name, kind, detail)
        SELECT gone.topic, gone.group_name, 'group_deleted', jsonb_build_object('status', gone.status)
        FROM gone)
    SELECT coalesce(array_agg(gone.group_id), '{}') INTO v_gone FROM gone;
    v_n := cardinality(v_gone);
    -- Leases have no foreign key to their group (its check locked the group
    -- row on every page). A statement of its own, after the groups' rows are
    -- gone: it sees any lease committed while the delete waited for a reader
    -- (on the group's partition cursors).
    DELETE FROM fanout.lease l WHERE l.group_id = ANY (v_gone);
    RETURN v_n;
END
$fn$;
