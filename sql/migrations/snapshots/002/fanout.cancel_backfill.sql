-- fanout.cancel_backfill(topic, group_name): stops a reference-mode group's
-- running backfill after its current batch; its checkpoint is kept, so
-- fanout.restart_backfill resumes from there. The group can read meanwhile
-- (it gets what has its bit so far).
-- Returns true when a backfill was running.
-- Raises: PGQ01, PGQ13, PGQ14. Tables: fanout.bitmap_job.
CREATE OR REPLACE FUNCTION fanout.cancel_backfill(topic text, group_name text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_g fanout.consumer_group;
BEGIN
    v_g := fanout._group_for_admin($1, $2);
    UPDATE fanout.bitmap_job j SET status = 'cancelled', updated_at = clock_timestamp()
    WHERE j.group_id = v_g.group_id AND j.kind = 'backfill' AND j.status IN ('not_started', 'in_progress');
    RETURN FOUND;
END
$fn$;
