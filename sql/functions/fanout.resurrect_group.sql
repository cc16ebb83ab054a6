-- fanout.resurrect_group(topic, group_name, backfill): brings a dead group
-- back to active by hand. In offset mode the group kept its position and
-- continues from there (backfill changes nothing: what was dropped meanwhile
-- is counted in lost_messages). In reference mode its bit goes back onto the
-- retained messages it had not completed (newest max_backfill since it
-- joined) through a batched backfill, unless backfill is false.
-- Returns the new status.
-- Raises: PGQ01, PGQ13, PGQ14, PGQ15 (the group is not dead), PGQ19.
-- Tables: fanout.consumer_group, fanout.bitmap_job, fanout.event_log.
CREATE OR REPLACE FUNCTION fanout.resurrect_group(topic text, group_name text, backfill boolean DEFAULT true)
RETURNS text
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_t fanout.topic;
    v_g fanout.consumer_group;
BEGIN
    PERFORM fanout._authorize($1, 'admin');
    v_t := fanout._topic($1);
    IF v_t.semantics <> 'pubsub' THEN
        RAISE EXCEPTION 'topic % is a queue topic; it has no groups to resurrect', quote_literal($1)
            USING ERRCODE = 'PGQ19';
    END IF;
    v_g := fanout._group_for_admin($1, $2);
    IF v_g.status <> 'dead' THEN
        RAISE EXCEPTION 'group % of topic % is %, not dead', quote_literal($2), quote_literal($1), v_g.status
            USING ERRCODE = 'PGQ15', DETAIL = format('current status: %s', v_g.status);
    END IF;
    v_g := fanout._resurrect(v_g);
    IF NOT coalesce($3, true) THEN
        -- Reference mode: no re-backfill; the group only gets new messages.
        UPDATE fanout.bitmap_job j SET status = 'cancelled', updated_at = clock_timestamp()
        WHERE j.group_id = v_g.group_id AND j.kind = 'backfill' AND j.status = 'not_started';
    END IF;
    RETURN v_g.status;
END
$fn$;
