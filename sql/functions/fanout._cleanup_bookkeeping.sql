-- fanout._cleanup_bookkeeping(p_now): deletes lease slots whose last page
-- closed over an hour ago (no read reused them since; an ack of any of their
-- pages then raises PGQ10), members not seen for
-- 7 days, event_log rows older than 30 days and dedupe keys older than
-- their topic's dedupe_window.
-- Bounded: at most 10,000 rows of each per call. Returns how many rows were
-- deleted; call again while it returns > 0. Takes its own advisory lock.
-- Tables: fanout.lease, fanout.member, fanout.event_log, fanout.dedupe,
-- fanout.seq_published.
CREATE OR REPLACE FUNCTION fanout._cleanup_bookkeeping(p_now timestamptz DEFAULT now())
RETURNS int
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_n    int;
    v_done int := 0;
BEGIN
    PERFORM fanout._authorize_all();  -- acts on every tenant
    IF NOT pg_try_advisory_xact_lock(hashtextextended('fanout.maint:cleanup_bookkeeping', 0)) THEN
        RETURN 0;
    END IF;
    -- The outer conditions again: a read may have reused the slot for a new
    -- page meanwhile (they are re-checked on the row's latest version).
    DELETE FROM fanout.lease l
    WHERE l.slot_id IN (SELECT c.slot_id FROM fanout.lease c
                        WHERE c.open_count = 0 AND c.closed_at < p_now - interval '1 hour'
                        LIMIT 10000)
      AND l.open_count = 0 AND l.closed_at < p_now - interval '1 hour';
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_done := v_done + v_n;
    DELETE FROM fanout.member m
    WHERE (m.group_id, m.consumer) IN (SELECT o.group_id, o.consumer FROM fanout.member o
                                       WHERE o.last_seen < p_now - interval '7 days' LIMIT 10000);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_done := v_done + v_n;
    DELETE FROM fanout.event_log e
    WHERE e.event_id IN (SELECT o.event_id FROM fanout.event_log o
                         WHERE o.at < p_now - interval '30 days' LIMIT 10000);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_done := v_done + v_n;
    -- Dedupe keys past their topic's window (a key is free again then).
    DELETE FROM fanout.dedupe d
    WHERE (d.topic_id, d.dedupe_key) IN (
        SELECT o.topic_id, o.dedupe_key FROM fanout.dedupe o JOIN fanout.topic t ON t.topic_id = o.topic_id
        WHERE o.created_at < p_now - t.dedupe_window LIMIT 10000);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    v_done := v_done + v_n;
    -- Published (aggregate, sequence) pairs past their topic's max_retention.
    DELETE FROM fanout.seq_published d
    WHERE (d.topic_id, d.message_group, d.seq) IN (
        SELECT o.topic_id, o.message_group, o.seq FROM fanout.seq_published o
        JOIN fanout.topic t ON t.topic_id = o.topic_id
        WHERE p_now - o.created_at > t.max_retention LIMIT 10000);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_done + v_n;
END
$fn$;
