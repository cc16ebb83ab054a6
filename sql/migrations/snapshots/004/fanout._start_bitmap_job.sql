-- fanout._start_bitmap_job(p_group_id, p_kind, p_from_id, p_batch, p_scope): (re)starts
-- a reference-mode backfill or release job for a group from p_from_id, and
-- cancels the opposite job if it is still running (a group that comes back
-- stops being released, and vice versa). Returns nothing; the job runs in
-- batches through fanout._bitmap_step. Only on a reference topic: a group of
-- a topic switched to offset (fanout._completion_switch), whose bit is about
-- to go, gets no job (resurrected, it reads on from its position; sought,
-- from where it was moved). On a topic switched from offset to reference
-- the job starts at the switch id at the earliest: rows below it carry no
-- bits and every group reads them by its position
-- (fanout._completion_switch_reference). Tables: fanout.bitmap_job, fanout.consumer_group,
-- fanout.topic.
CREATE OR REPLACE FUNCTION fanout._start_bitmap_job(
    p_group_id bigint, p_kind text, p_from_id bigint, p_batch int, p_scope text DEFAULT 'all_retained')
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
    UPDATE fanout.bitmap_job j SET status = 'cancelled', updated_at = clock_timestamp()
    WHERE j.group_id = p_group_id AND j.kind <> p_kind AND j.status IN ('not_started', 'in_progress');
    INSERT INTO fanout.bitmap_job AS j (group_id, kind, status, scope, from_id, next_id, batch_size)
    SELECT p_group_id, p_kind, 'not_started', p_scope, greatest(p_from_id, coalesce(t.completion_switch_id, 0)),
           greatest(p_from_id, coalesce(t.completion_switch_id, 0)), p_batch
    FROM fanout.consumer_group g JOIN fanout.topic t ON t.topic_id = g.topic_id
    WHERE g.group_id = p_group_id AND t.completion = 'reference'
    ON CONFLICT (group_id, kind) DO UPDATE
    SET status = 'not_started', scope = excluded.scope, from_id = excluded.from_id, next_id = excluded.next_id,
        batch_size = excluded.batch_size, upto_id = NULL, fence_txids = NULL, processed = 0, changed = 0,
        total = NULL, started_at = NULL, finished_at = NULL, last_error = NULL, updated_at = clock_timestamp();
$fn$;
