-- fanout.maint_skips(): the topics maintenance is passing by because another
-- transaction holds a lock it needs (e.g. a tenant's drop_topic or
-- alter_topic left open in a transaction): per function and topic, since
-- when (skipped_since), the last time (last_skipped), how many calls passed
-- it by (skips) and why. A topic leaves the list once the function gets
-- through it again (or it is dropped). The pgq-scheduler's /healthz says
-- "degraded" while one has been passed by longer than its threshold and
-- /metrics exports them (pgq_maintenance_skipped_topics,
-- pgq_maintenance_skipped_seconds).
-- Raises: PGQ21 (acts on every tenant: needs an admin grant on '%').
-- Tables: fanout.maint_skip, fanout.topic.
CREATE OR REPLACE FUNCTION fanout.maint_skips()
RETURNS TABLE(func text, topic text, skipped_since timestamptz, last_skipped timestamptz, skips bigint, reason text)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
BEGIN
    PERFORM fanout._authorize_all();  -- every tenant's topics
    RETURN QUERY
    SELECT s.func, s.topic, s.first_at, s.last_at, s.skips, s.reason
    FROM fanout.maint_skip s
    WHERE EXISTS (SELECT 1 FROM fanout.topic t WHERE t.topic_id = s.topic_id)
    ORDER BY s.first_at, s.func, s.topic;
END
$fn$;
