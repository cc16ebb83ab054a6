-- fanout._capture_release_chunks(p_limit): releases claim-checks of
-- statement-shaped capture messages (fanout.capture_chunk) whose message's
-- storage is gone: no storage partition of its topic that is not emptied
-- (fanout.partition, truncated_at NULL) covers the message's id, or the
-- topic itself is gone. A chunk's rows stay while its message can still be
-- read. Called by fanout._cleanup_bookkeeping on every call. Bounded: at
-- most p_limit rows per call; never waits (rows another transaction holds
-- are left to the next call). Returns how many chunk rows it deleted.
-- Tables: fanout.capture_chunk, fanout.partition, fanout.topic.
CREATE OR REPLACE FUNCTION fanout._capture_release_chunks(p_limit int DEFAULT 10000)
RETURNS int
LANGUAGE plpgsql
SET search_path = pg_catalog, fanout, pg_temp
AS $fn$
DECLARE
    v_n int;
BEGIN
    DELETE FROM fanout.capture_chunk k
    WHERE (k.topic_id, k.message_id, k.side, k.first_row) IN (
        SELECT c.topic_id, c.message_id, c.side, c.first_row FROM fanout.capture_chunk c
        WHERE NOT EXISTS (SELECT 1 FROM fanout.partition p
                          WHERE p.topic_id = c.topic_id AND p.truncated_at IS NULL
                            AND c.message_id BETWEEN p.lo_id AND p.hi_id)
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$fn$;
