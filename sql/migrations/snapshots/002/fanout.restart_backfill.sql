-- fanout.restart_backfill(topic, group_name): resumes a cancelled or failed
-- reference-mode backfill from its checkpoint (already-set bits stay; setting
-- a bit twice changes nothing).
-- Returns true when a backfill was restarted.
-- Raises: PGQ01, PGQ13, PGQ14. Tables: fanout.bitmap_job.
CREATE OR REPLACE FUNCTION fanout.restart_backfill(topic text, group_name text)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_g fanout.consumer_group;
BEGIN
    v_g := fanout._group_for_admin($1, $2);
    UPDATE fanout.bitmap_job j
    SET status = CASE WHEN j.upto_id IS NULL THEN 'not_started' ELSE 'in_progress' END,
        last_error = NULL, finished_at = NULL, updated_at = clock_timestamp()
    WHERE j.group_id = v_g.group_id AND j.kind = 'backfill' AND j.status IN ('cancelled', 'failed');
    RETURN FOUND;
END
$fn$;
