-- fanout._completion_switch(p_t, p_to): alter_topic's completion option.
-- p_t is the topic's row, locked FOR UPDATE by the caller; p_to the mode
-- asked for (normalized here). The same mode: nothing happens (false).
-- reference -> offset (true): both modes hand messages out through the same
-- windows, a reference group only skipping rows that lack its bit, and for a
-- group that joined normally every row of its windows carries its bit (the
-- stamps, reconciled: docs/architecture.md, "The delivery rule"). So what a
-- group still owes is its window position, its open leases and its retries
-- in both modes, and the switch changes the bookkeeping, not what anyone
-- receives: the topic's page functions are regenerated without the bit
-- filter, and cleanup decides by positions from now on. The groups keep
-- their bits (and readers keep reconciling stamps) until every transaction
-- running when the switch is seen committed has ended: one of them may
-- still run a page function compiled before (a session may keep a changed
-- function until its next transaction), which filters by bit; a group
-- without a bit would read nothing there. fanout._completion_switch_finish
-- (from cleanup, which leaves the topic alone until then) records those
-- transactions and, once they have ended, clears the bits; a new group may
-- subscribe only after that (PGQ28).
-- offset -> reference (true): fanout._completion_switch_reference, in one
-- short lock of the topic's table (docs/completion-switch.md); refused on a
-- queue topic (PGQ03: a queue message needs one ack), with more than 64
-- groups of any status (PGQ17: every group needs a bit), while a switch to
-- offset has not finished (PGQ28), and when the table cannot be locked
-- within its attempts (PGQ28).
-- Both directions are refused while a group's backfill or release (bitmap
-- job) has work left (PGQ28).
-- Reference -> offset locks no group row: a consumer's transaction that read a page (and
-- holds its group's row until it ends) does not hold the switch up, nor the
-- readers that would queue behind it. A job started by a status change that
-- commits after this check still runs: the switch finishes only once it has
-- (fanout._completion_switch_finish); none starts once the switch has
-- committed (fanout._start_bitmap_job: reference topics only).
-- Records completion_switch_id (the next id: rows below it were stamped) and
-- completion_switched_at; an event_log row.
-- Tables: fanout.topic, fanout.consumer_group, fanout.bitmap_job,
-- fanout.event_log; creates the topic's page functions (to reference: see
-- fanout._completion_switch_reference).
CREATE OR REPLACE FUNCTION fanout._completion_switch(p_t fanout.topic, p_to text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_to   text := fanout._normalize_option('completion', p_to);
    v_next bigint;
    v_jobs int;
    v_groups bigint;
BEGIN
    IF v_to = p_t.completion THEN
        RETURN false;
    END IF;
    IF v_to = 'reference' AND p_t.semantics = 'queue' THEN
        RAISE EXCEPTION 'completion reference applies to pubsub topics only; % is a queue topic', quote_literal(p_t.topic)
            USING ERRCODE = 'PGQ03';
    END IF;
    IF p_t.completion_switch_id IS NOT NULL AND p_t.completion_switch_done_at IS NULL THEN
        RAISE EXCEPTION 'topic % is still switching to offset completion; it cannot switch back yet', quote_literal(p_t.topic)
            USING ERRCODE = 'PGQ28',
                  HINT = 'retry once event_log shows completion_switched (maintenance finishes the switch)';
    END IF;
    SELECT count(*) INTO v_jobs
    FROM fanout.bitmap_job j JOIN fanout.consumer_group g ON g.group_id = j.group_id
    WHERE g.topic_id = p_t.topic_id AND j.status IN ('not_started', 'in_progress');
    IF v_jobs > 0 THEN
        RAISE EXCEPTION 'topic % has % backfill or release job(s) under way; its completion mode cannot switch now',
            quote_literal(p_t.topic), v_jobs
            USING ERRCODE = 'PGQ28',
                  HINT = 'retry once fanout.groups shows no backfill in progress (maintenance runs the jobs), or cancel_backfill';
    END IF;
    IF v_to = 'reference' THEN
        SELECT count(*) INTO v_groups FROM fanout.consumer_group g WHERE g.topic_id = p_t.topic_id;
        IF v_groups > 64 THEN
            RAISE EXCEPTION 'topic % has % groups; completion ''reference'' allows 64', quote_literal(p_t.topic), v_groups
                USING ERRCODE = 'PGQ17',
                      HINT = 'unsubscribe groups (cancelled ones count until subscription cleanup removes them), or stay in offset mode';
        END IF;
        v_next := fanout._completion_switch_reference(p_t);
        INSERT INTO fanout.event_log (topic, kind, detail)
        VALUES (p_t.topic, 'completion_switched',
                jsonb_build_object('from', p_t.completion, 'to', v_to, 'switch_id', v_next));
        RETURN true;
    END IF;
    v_next := fanout._next_id(p_t);
    UPDATE fanout.topic t
    SET completion = v_to, completion_switch_id = v_next, completion_switched_at = clock_timestamp(),
        completion_switch_vxids = NULL, completion_switch_done_at = NULL
    WHERE t.topic_id = p_t.topic_id;
    PERFORM fanout._create_page_functions(p_t.topic_id);  -- no bit filter
    INSERT INTO fanout.event_log (topic, kind, detail)
    VALUES (p_t.topic, 'completion_switch_started',
            jsonb_build_object('from', p_t.completion, 'to', v_to, 'switch_id', v_next));
    RETURN true;
END
$fn$;
